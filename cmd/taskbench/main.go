// Command taskbench measures task-service side by side with its peers: the
// claim lanes against River, a new task's wake latency, and every read at
// 10k, 100k and 1M tasks. It drops and recreates its own scratch databases
// and never touches the service's data.
//
// Run `taskbench help` for the commands; `taskbench COMMAND --help` for one.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/clawdbot/task-service/cmd/internal/version"
)

const (
	exitOK    = 0
	exitUsage = 2 // bad flags or arguments
)

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"lanes":   {summary: "claim/complete and create throughput: bare SQL, store, HTTP, the batched lane, River (make bench)", run: runBench},
		"wake":    {summary: "a new task's way to a long-polling worker: in-process, NOTIFY, run_at (make bench-wake)", run: runBenchWake},
		"scale":   {summary: "every admin and worker read at 10k, 100k and 1M tasks of history (make bench-scale)", run: runBenchScale},
		"version": {summary: "print the version and VCS revision of this binary", run: printVersion},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
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
		fmt.Fprintf(stderr, "taskbench: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "taskbench — task-service's benchmarks, side by side in one run\n\nUsage: taskbench COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nEach writes to a scratch database on the server of --database-url (or DATABASE_URL).\nRun `taskbench COMMAND --help` for a command's flags and an example.")
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "taskbench version takes no arguments\n")
		return exitUsage
	}
	fmt.Fprint(stdout, "taskbench "+version.Read().String())
	return exitOK
}
