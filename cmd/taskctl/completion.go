package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// taskctl completion bash|zsh|fish prints a completion script made from the
// command table: commands, each group's verbs, the global flags.

const completionUsage = `Usage: taskctl completion bash|zsh|fish

Prints a shell completion script for taskctl: commands, verbs and the global flags.

Set-up:
  bash  add to ~/.bashrc:  source <(taskctl completion bash)
  zsh   add to ~/.zshrc after compinit:  source <(taskctl completion zsh)
  fish  taskctl completion fish > ~/.config/fish/completions/taskctl.fish

Example:
  taskctl completion bash > /etc/bash_completion.d/taskctl
`

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, completionUsage)
		return exitOK
	}
	if len(args) != 1 {
		fmt.Fprint(stderr, "taskctl completion: say which shell: bash, zsh or fish\n\n"+completionUsage)
		return exitUsage
	}
	words := completionWords()
	switch args[0] {
	case "bash":
		fmt.Fprint(stdout, bashCompletion(words))
	case "zsh":
		fmt.Fprint(stdout, zshCompletion(words))
	case "fish":
		fmt.Fprint(stdout, fishCompletion(words))
	default:
		fmt.Fprintf(stderr, "taskctl completion: no completion for %q: say bash, zsh or fish\n", args[0])
		return exitUsage
	}
	return exitOK
}

// completion is what the scripts offer: commands and the verbs of groups,
// each with its summary's first line.
type completion struct {
	commands []named
	verbs    map[string][]named
}

type named struct{ name, summary string }

func completionWords() completion {
	out := completion{verbs: map[string][]named{}}
	for name, c := range commands() {
		out.commands = append(out.commands, named{name, firstLine(c.summary)})
	}
	sortNamed(out.commands)
	for g, verbs := range groupVerbs {
		for v, summary := range verbs {
			out.verbs[g] = append(out.verbs[g], named{v, firstLine(summary)})
		}
		sortNamed(out.verbs[g])
	}
	return out
}

func sortNamed(ns []named) { sort.Slice(ns, func(i, j int) bool { return ns[i].name < ns[j].name }) }

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func nameList(ns []named) string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.name
	}
	return strings.Join(out, " ")
}

func groupNames(c completion) []string {
	gs := make([]string, 0, len(c.verbs))
	for g := range c.verbs {
		gs = append(gs, g)
	}
	sort.Strings(gs)
	return gs
}

const globalFlagWords = "--api --json --help"

func bashCompletion(c completion) string {
	var cases strings.Builder
	for _, g := range groupNames(c) {
		fmt.Fprintf(&cases, "    %s) verbs=%q ;;\n", g, nameList(c.verbs[g]))
	}
	return `# bash completion for taskctl: source <(taskctl completion bash)
_taskctl() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  if [[ $prev == --api ]]; then return; fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "` + globalFlagWords + `" -- "$cur")); return
  fi
  # The words before the cursor that are not flags: the command, then its verb.
  local -a pos=() ; local i w
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    if [[ $w == --api ]]; then ((i++)); continue; fi
    [[ $w == -* ]] || pos+=("$w")
  done
  if ((${#pos[@]} == 0)); then
    COMPREPLY=($(compgen -W "` + nameList(c.commands) + `" -- "$cur")); return
  fi
  if ((${#pos[@]} == 1)); then
    local verbs=""
    case ${pos[0]} in
` + cases.String() + `    completion) verbs="bash zsh fish" ;;
    esac
    COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
  fi
}
complete -F _taskctl taskctl
`
}

func zshQuote(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, `'`, `'\''`), ":", `\:`)
}

func zshCompletion(c completion) string {
	var b strings.Builder
	b.WriteString("#compdef taskctl\n# zsh completion for taskctl: source <(taskctl completion zsh) after compinit\n_taskctl() {\n  local -a commands verbs\n  commands=(\n")
	for _, n := range c.commands {
		fmt.Fprintf(&b, "    '%s:%s'\n", n.name, zshQuote(n.summary))
	}
	b.WriteString("  )\n  local -a pos\n  pos=(${${words[2,CURRENT-1]}:#-*})\n  if (( ${#pos} == 0 )); then\n    [[ $words[CURRENT] == -* ]] && { compadd -- " + globalFlagWords + "; return }\n    _describe -t commands 'taskctl command' commands; return\n  fi\n  case $pos[1] in\n")
	for _, g := range groupNames(c) {
		fmt.Fprintf(&b, "    %s) verbs=(", g)
		for _, v := range c.verbs[g] {
			fmt.Fprintf(&b, " '%s:%s'", v.name, zshQuote(v.summary))
		}
		b.WriteString(" ) ;;\n")
	}
	b.WriteString("    completion) verbs=(bash zsh fish) ;;\n  esac\n  if (( ${#pos} == 1 )) && [[ $words[CURRENT] != -* ]]; then\n    _describe -t verbs 'verb' verbs\n  else\n    compadd -- " + globalFlagWords + "\n  fi\n}\ncompdef _taskctl taskctl\n")
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `\'`) + "'"
}

func fishCompletion(c completion) string {
	var b strings.Builder
	b.WriteString("# fish completion for taskctl: taskctl completion fish > ~/.config/fish/completions/taskctl.fish\ncomplete -c taskctl -f\n")
	b.WriteString("complete -c taskctl -l api -r -d 'task-service address'\ncomplete -c taskctl -l json -d 'print JSON'\ncomplete -c taskctl -l help -d 'help'\n")
	all := nameList(c.commands)
	for _, n := range c.commands {
		fmt.Fprintf(&b, "complete -c taskctl -n 'not __fish_seen_subcommand_from %s' -a %s -d %s\n", all, n.name, fishQuote(n.summary))
	}
	for _, g := range groupNames(c) {
		verbs := nameList(c.verbs[g])
		for _, v := range c.verbs[g] {
			fmt.Fprintf(&b, "complete -c taskctl -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %s -d %s\n", g, verbs, v.name, fishQuote(v.summary))
		}
	}
	b.WriteString("complete -c taskctl -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	return b.String()
}
