package main

import (
	"fmt"
	"io"
	"strings"
)

// task-worker completion bash|zsh|fish prints a completion script for its
// flags (every setting is a flag); file flags complete file names.

const completionUsage = `Usage: task-worker completion bash|zsh|fish

Prints a shell completion script for task-worker's flags.

Set-up:
  bash  add to ~/.bashrc:  source <(task-worker completion bash)
  zsh   add to ~/.zshrc after compinit:  source <(task-worker completion zsh)
  fish  task-worker completion fish > ~/.config/fish/completions/task-worker.fish
`

// fileFlags take a path: the scripts complete file names after them.
var fileFlags = map[string]bool{"config": true, "password-file": true, "command": true, "work-dir": true}

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh" && args[0] != "fish") {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, completionUsage)
			return 0
		}
		fmt.Fprint(stderr, "task-worker completion: say which shell: bash, zsh or fish\n\n"+completionUsage)
		return 2
	}
	var flags, files []string
	for _, o := range options() {
		flags = append(flags, "--"+o.flag)
		if fileFlags[o.flag] {
			files = append(files, "--"+o.flag)
		}
	}
	flags = append(flags, "--version", "--help")
	switch args[0] {
	case "bash":
		fmt.Fprintf(stdout, `# bash completion for task-worker: source <(task-worker completion bash)
_task_worker() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  case $prev in
    %s) COMPREPLY=($(compgen -f -- "$cur")); return ;;
  esac
  if ((COMP_CWORD == 1)) && [[ $cur != -* ]]; then
    COMPREPLY=($(compgen -W "version completion" -- "$cur")); return
  fi
  COMPREPLY=($(compgen -W "%s" -- "$cur"))
}
complete -F _task_worker task-worker
`, strings.Join(files, "|"), strings.Join(flags, " "))
	case "zsh":
		var specs strings.Builder
		for _, o := range options() {
			arg := ":value: "
			if o.isBool {
				arg = ""
			} else if fileFlags[o.flag] {
				arg = ":file:_files"
			}
			fmt.Fprintf(&specs, "    '--%s[%s]%s'\n", o.flag, zshQuote(o.help), arg)
		}
		fmt.Fprintf(stdout, "#compdef task-worker\n# zsh completion for task-worker: source <(task-worker completion zsh) after compinit\n_task_worker() {\n  _arguments \\\n%s    '--version[print the version]' '--help[print the help]'\n}\ncompdef _task_worker task-worker\n",
			strings.ReplaceAll(specs.String(), "'\n", "' \\\n"))
	case "fish":
		fmt.Fprint(stdout, "# fish completion for task-worker: task-worker completion fish > ~/.config/fish/completions/task-worker.fish\n")
		for _, o := range options() {
			extra := " -r -f"
			if o.isBool {
				extra = ""
			} else if fileFlags[o.flag] {
				extra = " -r -F"
			}
			fmt.Fprintf(stdout, "complete -c task-worker -l %s%s -d '%s'\n", o.flag, extra, strings.ReplaceAll(o.help, "'", `\'`))
		}
		fmt.Fprint(stdout, "complete -c task-worker -l version -d 'print the version'\ncomplete -c task-worker -n '__fish_use_subcommand' -a 'version completion' -f\n")
	}
	return 0
}

func zshQuote(s string) string {
	return strings.NewReplacer(`'`, `'\''`, "[", `\[`, "]", `\]`).Replace(s)
}
