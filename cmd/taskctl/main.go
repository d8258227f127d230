// Command taskctl is the CLI for admins and ops of task-service.
//
// Run `taskctl help` for the commands; `taskctl COMMAND --help` for one.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/clawdbot/task-service/cmd/internal/version"
)

// command is one taskctl subcommand. run gets the arguments after its name
// and returns the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is filled by each command's file in an init-free way: add an
// entry here when adding a command file.
func commands() map[string]command {
	return map[string]command{
		"login":      {summary: "log in to task-service and keep the token", run: entry((*app).login)},
		"logout":     {summary: "forget the kept login", run: entry((*app).logout)},
		"tasks":      {summary: "create, list, show, cancel, assign, retry and release tasks", run: entry(tasksCommand)},
		"types":      {summary: "create, list and show task types (SOP and params schema)", run: entry(typesCommand)},
		"workers":    {summary: "create worker accounts and list what workers are doing", run: entry(workersCommand)},
		"history":    {summary: "a task's timeline: time, who, what", run: entry((*app).history)},
		"chain":      {summary: "a task's retry lineage, original to latest", run: entry((*app).chain)},
		"tail":       {summary: "follow the event log live (reconnects and resumes by itself)", run: entry((*app).tail)},
		"stats":      {summary: "tasks per status, queue, workers online, retries, reactor lag", run: entry((*app).stats)},
		"usage":      {summary: "LLM usage: tokens and cost per type today against budgets, or of a task and its chain", run: entry((*app).usage)},
		"digest":     {summary: "today's daily digest, as the Telegram chat gets it (--preview)", run: entry((*app).digest)},
		"data":       {summary: "task data: prune by retention, verify objects, sweep orphans (database and store access)", run: entry(dataCommand)},
		"replay":     {summary: "rebuild the projections from the events, or --verify them (database access)", run: entry((*app).replay)},
		"events":     {summary: "the event log's archive: verify its objects against their manifests (store access)", run: entry(eventsCommand)},
		"version":    {summary: "print the version and VCS revision of this binary", run: printVersion},
		"completion": {summary: "print a shell completion script: bash, zsh or fish", run: runCompletion},

		// Schedules (issue 13).
		"workflows": {summary: "graphs of tasks created at once, each waiting for its dependencies: create, list, show, cancel", run: entry(workflowsCommand)},
		"schedules": {summary: "recurring work: create, list, show, update, pause, resume, cancel, run schedules; their executions", run: entry(schedulesCommand)},
		"rules":     {summary: "freshness rules: tasks for the stale keys of a watchlist; create, list, show, edit, pause, resume, delete, keys set", run: entry(rulesCommand)},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	args, err := hoistGlobalFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "taskctl: %v\n\n", err)
		usage(stderr, cmds)
		return exitUsage
	}
	if len(args) == 0 {
		// Nothing asked: the help, on stderr, as a mistake scripts can see.
		usage(stderr, cmds)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout, cmds)
		return exitOK
	case "-version", "--version":
		args[0] = "version"
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "taskctl: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// globalFlags are the flags every API command takes; true for those that
// take a value.
var globalFlags = map[string]bool{"api": true, "json": false}

// hoistGlobalFlags moves the global flags written before the command (or
// before a group's verb) to the end, where the command's own flags are
// parsed: `taskctl --api X stats` is `taskctl stats --api X`. Anything after
// a "--" stays an argument.
func hoistGlobalFlags(args []string) ([]string, error) {
	var lead []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		takesValue, global := globalFlags[name]
		if !global {
			break // -h, --version or a mistake: the caller decides
		}
		n := 1
		if takesValue && !hasValue {
			if len(args) < 2 {
				return nil, fmt.Errorf("flag needs an argument: %s", args[0])
			}
			n = 2
		}
		lead, args = append(lead, args[:n]...), args[n:]
	}
	if len(lead) == 0 {
		return args, nil
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		// No command after the global flags: nothing to hoist them into.
		return args, nil
	}
	end := len(args)
	for i, a := range args {
		if a == "--" {
			end = i
			break
		}
	}
	out := append(append(append([]string{}, args[:end]...), lead...), args[end:]...)
	return out, nil
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "taskctl — the command line for task-service admins and ops\n\nUsage: taskctl COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun `taskctl COMMAND --help` for a command's flags and an example.")
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprint(stdout, "Usage: taskctl version\n\nPrints the module version and the git revision this binary was built from.\n\nExample:\n  taskctl version\n")
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "taskctl version takes no arguments\n")
		return exitUsage
	}
	fmt.Fprint(stdout, "taskctl "+version.Read().String())
	return 0
}
