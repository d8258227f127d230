package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/clawdbot/task-service/api/client"
)

// bulkFlags are the task list's filter flags (as tasks list takes them) and
// the confirmation flags of an --all-matching action.
type bulkFlags struct {
	all                   *bool
	yes                   *bool
	status, typeRef, prio *string
	worker, search        *string
	queue, retries, stuck *bool
}

func addBulkFlags(fs *flag.FlagSet, verb string) *bulkFlags {
	return &bulkFlags{
		all:     fs.Bool("all-matching", false, verb+" every task the filter flags match (all pages, not one); asks to confirm first"),
		yes:     fs.Bool("yes", false, "with --all-matching: go ahead without asking (needed when standard input is not a terminal)"),
		status:  fs.String("status", "", "with --all-matching: pending, in_progress, completed, failed or cancelled"),
		typeRef: fs.String("type", "", "with --all-matching: task type name or id"),
		prio:    fs.String("priority", "", "with --all-matching: urgent, high, medium or low"),
		worker:  fs.String("worker", "", "with --all-matching: tasks assigned to this worker (id, email or name)"),
		search:  fs.String("search", "", "with --all-matching: title contains this, ignoring case"),
		queue:   fs.Bool("queue", false, "with --all-matching: only the queue (pending tasks nobody holds)"),
		retries: fs.Bool("retries", false, "with --all-matching: only retries"),
		stuck:   fs.Bool("stuck", false, "with --all-matching: only tasks held by (or reserved for) a silent worker"),
	}
}

// filterSet reports whether any filter flag was given.
func (b *bulkFlags) filterSet() bool {
	return *b.status != "" || *b.typeRef != "" || *b.prio != "" || *b.worker != "" || *b.search != "" ||
		*b.queue || *b.retries || *b.stuck
}

// filter resolves the flags' names to the API's filter.
func (b *bulkFlags) filter(ctx context.Context, c *client.Client) (client.TaskFilter, error) {
	f := client.TaskFilter{Status: *b.status, Priority: *b.prio, Q: *b.search, Unassigned: *b.queue,
		Retries: *b.retries, Stuck: *b.stuck}
	if *b.typeRef != "" {
		tt, err := resolveType(ctx, c, *b.typeRef)
		if err != nil {
			return f, err
		}
		f.TaskTypeID = tt.ID
	}
	if *b.worker != "" {
		w, err := resolveWorker(ctx, c, *b.worker)
		if err != nil {
			return f, err
		}
		f.AssignedTo = w.ID
	}
	return f, nil
}

// describe is the filter flags as given, for the confirmation.
func (b *bulkFlags) describe() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", name, v))
		}
	}
	add("status", *b.status)
	add("type", *b.typeRef)
	add("priority", *b.prio)
	add("worker", *b.worker)
	add("search", *b.search)
	for _, flag := range []struct {
		name string
		on   bool
	}{{"queue", *b.queue}, {"retries", *b.retries}, {"stuck", *b.stuck}} {
		if flag.on {
			parts = append(parts, flag.name)
		}
	}
	return strings.Join(parts, " ")
}

// stdinIsTerminal reports whether r is a terminal someone can answer on
// (not /dev/null, a pipe or a file).
func stdinIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// bulkVerbs are the words of an action: cancel, cancelled, Cancel.
var bulkVerbs = map[string][3]string{
	"cancel": {"cancel", "cancelled", "Cancel"},
	"retry":  {"retry", "retried", "Retry"},
}

// runBulk counts what the filter matches, asks to confirm (or takes --yes),
// then acts on every match, one request of up to 1,000 tasks at a time,
// with progress on stderr.
func (a *app) runBulk(spec cmdSpec, call *apiCall, bf *bulkFlags, action, reason string, asJSON bool) int {
	verbs := bulkVerbs[action]
	if !bf.filterSet() {
		return a.fail(spec.name, usagef("--all-matching needs at least one filter flag (--status, --type, --priority, --worker, --search, --queue, --retries, --stuck)"))
	}
	c, ctx := call.c, call.ctx
	f, err := bf.filter(ctx, c)
	if err != nil {
		return a.fail(spec.name, err)
	}
	req := client.BulkRequest{Action: action, Filter: f, Reason: reason, DryRun: true}
	dry, err := c.BulkTasks(ctx, req)
	if err != nil {
		return a.fail(spec.name, err)
	}
	count := fmt.Sprint(dry.Matching)
	if dry.MatchingAtLeast {
		count = "at least " + count
	}
	if dry.Matching == 0 {
		if asJSON {
			return a.printJSON(client.BulkResult{Action: action, Skips: []client.BulkSkip{}})
		}
		fmt.Fprintf(a.stdout, "No task matching %s can be %s; nothing to do.\n", bf.describe(), verbs[1])
		return exitOK
	}
	fmt.Fprintf(a.stderr, "%s tasks matching %s would be %s.\n", count, bf.describe(), verbs[1])
	if !*bf.yes {
		if !stdinIsTerminal(a.stdin) {
			fmt.Fprintf(a.stderr, "taskctl %s: not confirmed: standard input is not a terminal; pass --yes to %s them\n", spec.name, verbs[0])
			return exitUsage
		}
		fmt.Fprintf(a.stderr, "%s all %s? [y/N] ", verbs[2], count)
		line, _ := bufio.NewReader(a.stdin).ReadString('\n')
		if answer := strings.ToLower(strings.TrimSpace(line)); answer != "y" && answer != "yes" {
			fmt.Fprintln(a.stderr, "Not confirmed; nothing changed.")
			return exitFailure
		}
	}
	req.DryRun = false
	total, err := c.BulkAll(ctx, req, func(t client.BulkResult) {
		fmt.Fprintf(a.stderr, "%s %d of %s (skipped %d)\n", verbs[1], t.Done, count, t.Skipped)
	})
	if err != nil {
		fmt.Fprintf(a.stderr, "Stopped after %d %s, %d skipped.\n", total.Done, verbs[1], total.Skipped)
		return a.fail(spec.name, err)
	}
	if asJSON {
		return a.printJSON(total)
	}
	fmt.Fprintf(a.stdout, "%s %d tasks; skipped %d that ended or changed meanwhile.\n", strings.ToUpper(verbs[1][:1])+verbs[1][1:], total.Done, total.Skipped)
	for _, s := range total.Skips {
		fmt.Fprintf(a.stdout, "  skipped %s: %s\n", s.ID, s.Message)
	}
	return exitOK
}
