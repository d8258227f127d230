// Command taskctl is the CLI for admins and ops of task-service.
//
// Run `taskctl help` for the commands; `taskctl COMMAND --help` for one.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"

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
		"bench":       {summary: "measure claim/complete throughput: bare SQL, store and HTTP side by side", run: runBench},
		"bench-wake":  {summary: "time a new task's way to a long-polling worker, in-process wake and NOTIFY", run: runBenchWake},
		"bench-scale": {summary: "time every admin and worker read at 10k, 100k and 1M tasks of history", run: runBenchScale},

		"login":   {summary: "log in to task-service and keep the token", run: entry((*app).login)},
		"logout":  {summary: "forget the kept login", run: entry((*app).logout)},
		"tasks":   {summary: "create, list, show, cancel, assign and retry tasks", run: entry(tasksCommand)},
		"types":   {summary: "create, list and show task types (SOP and params schema)", run: entry(typesCommand)},
		"workers": {summary: "create worker accounts and list what workers are doing", run: entry(workersCommand)},
		"history": {summary: "a task's timeline: time, who, what", run: entry((*app).history)},
		"chain":   {summary: "a task's retry lineage, original to latest", run: entry((*app).chain)},
		"tail":    {summary: "follow the event log live (reconnects and resumes by itself)", run: entry((*app).tail)},
		"stats":   {summary: "tasks per status, queue, workers online, retries, reactor lag", run: entry((*app).stats)},
		"usage":   {summary: "LLM usage: tokens and cost per type today against budgets, or of a task and its chain", run: entry((*app).usage)},
		"digest":  {summary: "today's daily digest, as the Telegram chat gets it (--preview)", run: entry((*app).digest)},
		"data":    {summary: "task data: prune by retention, verify objects, sweep orphans (database and store access)", run: entry(dataCommand)},
		"replay":  {summary: "rebuild the projections from the events, or --verify them (database access)", run: entry((*app).replay)},
		"version": {summary: "print the version and VCS revision of this binary", run: printVersion},

		// Schedules (issue 13).
		"schedules": {summary: "recurring work: create, list, show, update, pause, resume, cancel, run schedules; their executions", run: entry(schedulesCommand)},
		"rules":     {summary: "freshness rules: tasks for the stale keys of a watchlist; create, list, show, edit, pause, resume, delete, keys set", run: entry(rulesCommand)},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, cmds)
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "taskctl: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
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
