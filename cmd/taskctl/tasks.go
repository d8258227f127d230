package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

var tasksCommand = group("tasks", "Create, list, inspect and steer tasks.", map[string]subcommand{
	"create":  {"create a task of a type", (*app).tasksCreate},
	"import":  {"create the tasks of a JSON Lines file, up to 1,000 a request", (*app).tasksImport},
	"list":    {"list tasks, newest first", (*app).tasksList},
	"show":    {"show a task with its assignments, updates and retries (or as it was at a time)", (*app).tasksShow},
	"cancel":  {"cancel a task that has not ended", (*app).tasksCancel},
	"assign":  {"give a pending task to a worker", (*app).tasksAssign},
	"retry":   {"retry a failed task now, with an optional hint", (*app).tasksRetry},
	"release": {"free a blocked task from its dependencies: it becomes claimable now", (*app).tasksRelease},
	"data":    {"list a task's uploaded files, or --download them", (*app).tasksData},
})

var tasksCreateSpec = cmdSpec{
	name: "tasks create", args: "--type TYPE --title TITLE [flags]",
	summary: "Create a task. Params must satisfy the type's JSON Schema; the task waits in the queue\n" +
		"until a worker claims it (or the worker given with --assign). With --at or --in it waits,\n" +
		"scheduled, until that time before any worker can claim it. With --depends-on it starts\n" +
		"blocked and becomes claimable when the last of those tasks completes (a retried one counts\n" +
		"when its latest retry completes); its worker gets their results as inputs. If one of them\n" +
		"fails for good, the task is cancelled (dependency_failed), or with --on-dependency-failure\n" +
		"wait it stays blocked until you retry that task or run taskctl tasks release.",
	example: `taskctl tasks create --type code_review --title "Review PR 42" --priority high \
  --params '{"repo": "acme/api", "pr": 42}' --assign alice@example.com --reason "knows the code"
taskctl tasks create --type crawl --title "Crawl NVDA tonight" --at 2030-01-02T23:00:00Z
taskctl tasks create --type crawl --title "Crawl NVDA again" --in 90m
taskctl tasks create --type report --title "NVDA report" --depends-on 0190f4c2-...,0190f4c3-... --on-dependency-failure wait`,
}

func (a *app) tasksCreate(args []string) int {
	spec := tasksCreateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	typeRef := fs.String("type", "", "task type name or id (required)")
	title := fs.String("title", "", "title (required)")
	desc := fs.String("description", "", "description")
	descFile := fs.String("description-file", "", "read the description from this file")
	params := fs.String("params", "", "params as a JSON object")
	paramsFile := fs.String("params-file", "", "read the params from this JSON file")
	priority := fs.String("priority", "medium", "urgent, high, medium or low")
	assign := fs.String("assign", "", "give the task to this worker (id, email or name)")
	reason := fs.String("reason", "", "why it goes to that worker")
	uniqueKey := fs.String("unique-key", "", "no other task of the type with this key may be pending or in progress")
	uniqueFor := fs.String("unique-for", "", "with --unique-key: also refuse the key this long after the last completed task with it (e.g. 6h)")
	existing := fs.Bool("existing", false, "with --unique-key: when another task holds the key, print that task instead of failing")
	at := fs.String("at", "", "run at this RFC 3339 time: not claimable before then")
	in := fs.Duration("in", 0, "run this long from now (90m, 2h): not claimable before then")
	dependsOn := fs.String("depends-on", "", "task ids, comma-separated, that must complete first: the task starts blocked")
	onDepFailure := fs.String("on-dependency-failure", "", "with --depends-on, when one fails for good: cancel (the default) or wait (stay blocked for an admin)")
	asJSON := fs.Bool("json", false, "print the task as JSON")
	_, code, ok := a.parseArgs(fs, spec, args, 0, "")
	if !ok {
		return code
	}
	if *typeRef == "" || strings.TrimSpace(*title) == "" {
		return a.fail(spec.name, usagef("--type and --title are required"))
	}
	deps := listArg(*dependsOn)
	if *onDepFailure != "" && len(deps) == 0 {
		return a.fail(spec.name, usagef("--on-dependency-failure needs --depends-on"))
	}
	runAt, err := runAtArg(*at, *in)
	if err != nil {
		return a.fail(spec.name, err)
	}
	description, err := textArg(*desc, *descFile, "description")
	if err != nil {
		return a.fail(spec.name, err)
	}
	p, err := jsonArg(*params, *paramsFile, "params")
	if err != nil {
		return a.fail(spec.name, err)
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	tt, err := resolveType(ctx, c, *typeRef)
	if err != nil {
		return a.fail(spec.name, err)
	}
	nt := client.NewTask{Title: *title, Description: description, TaskTypeID: tt.ID, Params: p,
		Priority: events.Priority(*priority), Reason: *reason, UniqueKey: *uniqueKey, UniqueFor: *uniqueFor,
		RunAt: runAt, DependsOn: deps, OnDependencyFailure: *onDepFailure}
	if *existing {
		nt.OnDuplicate = "existing"
	}
	if *assign != "" {
		w, err := resolveWorker(ctx, c, *assign)
		if err != nil {
			return a.fail(spec.name, err)
		}
		nt.AssignedTo = w.ID
	}
	t, created, err := c.CreateTaskOnce(ctx, nt)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(t)
	}
	verb := "Created"
	if !created {
		verb = "Already there (it holds the unique key):"
	}
	fmt.Fprintf(a.stdout, "%s task %s: %s (%s, %s)\n", verb, t.ID, t.Title, t.Status, t.Priority)
	if t.Scheduled {
		fmt.Fprintf(a.stdout, "Scheduled for %s\n", fmtTime(t.AvailableAt))
	}
	if t.Status == events.StatusBlocked {
		fmt.Fprintf(a.stdout, "Blocked until its %d dependencies complete.\n", len(t.DependsOn))
	}
	fmt.Fprintf(a.stdout, "Follow it: taskctl history %s\n", t.ID)
	return exitOK
}

// listArg splits a comma-separated flag value, dropping empty items.
func listArg(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// runAtArg is --at or --in as the RFC 3339 run_at the API takes; "" for
// neither. The server checks the time itself.
func runAtArg(at string, in time.Duration) (string, error) {
	switch {
	case at != "" && in != 0:
		return "", usagef("give --at or --in, not both")
	case in < 0:
		return "", usagef("--in must not be negative")
	case in > 0:
		return time.Now().Add(in).UTC().Format(time.RFC3339Nano), nil
	}
	return at, nil
}

// textArg is a flag's text or the content of its -file twin.
func textArg(value, file, name string) (string, error) {
	if file == "" {
		return value, nil
	}
	if value != "" {
		return "", usagef("give --%s or --%s-file, not both", name, name)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("--%s-file: %v", name, err)
	}
	return string(b), nil
}

// jsonArg is a flag's JSON or the content of its -file twin, checked.
func jsonArg(value, file, name string) (json.RawMessage, error) {
	text, err := textArg(value, file, name)
	if err != nil || strings.TrimSpace(text) == "" {
		return nil, err
	}
	if !json.Valid([]byte(text)) {
		var v any
		err := json.Unmarshal([]byte(text), &v)
		return nil, usagef("--%s is not JSON: %v", name, err)
	}
	return json.RawMessage(text), nil
}

var tasksListSpec = cmdSpec{
	name: "tasks list", args: "[flags]",
	summary: "List tasks, newest first, one page at a time (--after continues). The same filter flags\n" +
		"select what tasks cancel/retry --all-matching act on.",
	example: "taskctl tasks list --status failed --type code_review --limit 20",
}

func (a *app) tasksList(args []string) int {
	spec := tasksListSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	status := fs.String("status", "", "pending, in_progress, completed, failed or cancelled")
	typeRef := fs.String("type", "", "task type name or id")
	priority := fs.String("priority", "", "urgent, high, medium or low")
	worker := fs.String("worker", "", "tasks assigned to this worker (id, email or name)")
	queue := fs.Bool("queue", false, "only the queue: pending tasks nobody holds")
	retries := fs.Bool("retries", false, "only retries")
	stuck := fs.Bool("stuck", false, "only tasks held by (or reserved for) a silent worker")
	search := fs.String("search", "", "title contains this, ignoring case")
	limit := fs.Int("limit", 50, "page size (1-200)")
	after := fs.String("after", "", "continue after this cursor (printed under a full page)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	c, ctx := call.c, call.ctx
	q := client.TaskQuery{Status: *status, Priority: *priority, Unassigned: *queue, Retries: *retries, Stuck: *stuck, Q: *search,
		After: *after, Limit: *limit}
	if *typeRef != "" {
		tt, err := resolveType(ctx, c, *typeRef)
		if err != nil {
			return a.fail(spec.name, err)
		}
		q.TaskTypeID = tt.ID
	}
	if *worker != "" {
		w, err := resolveWorker(ctx, c, *worker)
		if err != nil {
			return a.fail(spec.name, err)
		}
		q.AssignedTo = w.ID
	}
	page, err := c.Tasks(ctx, q)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(page)
	}
	n := loadNames(ctx, c)
	now := time.Now()
	tw := a.table()
	fmt.Fprintln(tw, "ID\tSTATUS\tPRIORITY\tTYPE\tWORKER\tAGE\tTITLE")
	for _, t := range page.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Status, t.Priority, n.taskType(t.TaskTypeID),
			n.user(t.AssignedTo), age(t.CreatedAt, now), clip(t.Title, 60))
	}
	tw.Flush()
	if len(page.Tasks) == 0 {
		fmt.Fprintln(a.stdout, "(no tasks)")
	}
	fmt.Fprintf(a.stdout, "\nQueue depth: %d\n", page.QueueDepth)
	if page.NextCursor != "" {
		fmt.Fprintf(a.stdout, "More: taskctl tasks list %s--after %s\n", relist(args), page.NextCursor)
	}
	return exitOK
}

// relist repeats the list flags except --after, for the "More:" hint.
func relist(args []string) string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--after" || a == "-after" {
			i++
			continue
		}
		if strings.HasPrefix(a, "--after=") || strings.HasPrefix(a, "-after=") {
			continue
		}
		if strings.ContainsAny(a, " \t'\"") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, " ") + " "
}

var tasksShowSpec = cmdSpec{
	name: "tasks show", args: "TASK [--at TIME] [--json]",
	summary: "Show a task with its type, assignments, update thread, parent and retries. With --at,\n" +
		"show the task as it was at that time (the fold of its events up to then).",
	example: "taskctl tasks show 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d --at 2026-11-21T14:05:00Z",
}

func (a *app) tasksShow(args []string) int {
	spec := tasksShowSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	at := fs.String("at", "", "show the task as it was at this RFC 3339 time")
	asJSON := fs.Bool("json", false, "print the task as JSON")
	pos, code, ok := a.parseArgs(fs, spec, args, 1, "TASK (a task id)")
	if !ok {
		return code
	}
	var when time.Time
	if *at != "" {
		var err error
		if when, err = time.Parse(time.RFC3339Nano, *at); err != nil {
			return a.fail(spec.name, usagef("--at: %v (use RFC 3339, e.g. 2026-11-21T14:05:00Z)", err))
		}
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	n := loadNames(ctx, c)
	if !when.IsZero() {
		t, err := c.TaskAt(ctx, pos[0], when)
		if err != nil {
			return a.fail(spec.name, err)
		}
		if *asJSON {
			return a.printJSON(t)
		}
		fmt.Fprintf(a.stdout, "As of %s (version %d):\n", fmtTime(when), t.Version)
		a.printTask(t, n)
		return exitOK
	}
	d, err := c.Task(ctx, pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(d)
	}
	a.printDetail(d, n)
	return exitOK
}

func (a *app) printTask(t *events.Task, n names) {
	tw := a.table()
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Task", t.ID)
	row("Title", t.Title)
	row("Status", string(t.Status))
	row("Type", n.taskType(t.TaskTypeID))
	row("Priority", string(t.Priority))
	row("Worker", n.user(t.AssignedTo))
	row("Attempt", fmt.Sprint(t.RetryCount+1))
	if t.ParentTaskID != nil {
		row("Retry of", *t.ParentTaskID)
	}
	if t.UniqueKey != nil {
		row("Unique key", *t.UniqueKey)
	}
	row("Created", fmtTime(t.CreatedAt)+" by "+n.user(t.CreatedBy))
	if t.Scheduled {
		row("Scheduled", "for "+fmtTime(t.AvailableAt))
	} else if t.AvailableAt.After(t.CreatedAt) {
		row("Available", fmtTime(t.AvailableAt))
	}
	row("Started", fmtTimePtr(t.StartedAt))
	row("Ended", fmtTimePtr(t.CompletedAt))
	if t.FailureKind != nil || t.FailureReason != nil {
		row("Failure", deref(t.FailureKind)+": "+clip(deref(t.FailureReason), 200))
	}
	if t.RetryOutcome != nil {
		out := *t.RetryOutcome
		if t.RetryTaskID != nil {
			out += " -> " + *t.RetryTaskID
		}
		row("Retry", out)
	}
	row("Params", string(t.Params))
	if len(t.Result) > 0 {
		row("Result", clip(string(t.Result), 200))
	}
	tw.Flush()
	if strings.TrimSpace(t.Description) != "" {
		fmt.Fprintf(a.stdout, "\nDescription:\n%s\n", indent(t.Description))
	}
}

func (a *app) printDetail(d *store.TaskDetail, n names) {
	if d.TaskType != nil {
		n.types[d.TaskType.ID] = d.TaskType.Name
	}
	a.printTask(&d.Task, n)
	if len(d.Assignments) > 0 {
		fmt.Fprintln(a.stdout, "\nAssignments:")
		tw := a.table()
		for _, as := range d.Assignments {
			fmt.Fprintf(tw, "  %s\t%s\t%s\tby %s\t%s\n", fmtTime(as.At), as.Kind, n.user(&as.WorkerID), n.user(as.AssignedBy), clip(as.Reason, 80))
		}
		tw.Flush()
	}
	if len(d.Updates) > 0 {
		fmt.Fprintln(a.stdout, "\nUpdates:")
		tw := a.table()
		for _, u := range d.Updates {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", fmtTime(u.CreatedAt), n.user(u.AuthorID), clip(u.Message, 120))
		}
		tw.Flush()
	}
	if d.Parent != nil {
		fmt.Fprintf(a.stdout, "\nParent: %s (%s) %s\n", d.Parent.ID, d.Parent.Status, clip(d.Parent.Title, 60))
	}
	if len(d.Retries) > 0 {
		fmt.Fprintln(a.stdout, "\nRetries:")
		for _, r := range d.Retries {
			fmt.Fprintf(a.stdout, "  %s (%s) %s\n", r.ID, r.Status, clip(r.Title, 60))
		}
	}
	fmt.Fprintf(a.stdout, "\nHistory: taskctl history %s\n", d.ID)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

var tasksCancelSpec = cmdSpec{
	name: "tasks cancel", args: "TASK [--reason TEXT] | --all-matching FILTER FLAGS --reason TEXT [--yes]",
	summary: "Cancel a task that has not ended; a worker holding it is told on its next call.\n" +
		"With --all-matching, cancel every task the filter flags match that has not ended, on every\n" +
		"page, not one: it shows how many first and asks to confirm (--yes skips the question and is\n" +
		"needed when standard input is not a terminal). Each task gets its own task.cancelled with\n" +
		"the reason; tasks that end meanwhile are skipped and counted. Progress goes to stderr.",
	example: `taskctl tasks cancel 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d --reason "duplicate of PR 41"
taskctl tasks cancel --all-matching --type crawl --status pending --reason "upstream API retired"
taskctl tasks cancel --all-matching --search NVDA --queue --reason "ticker delisted" --yes`,
}

func (a *app) tasksCancel(args []string) int {
	spec := tasksCancelSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why (required with --all-matching)")
	asJSON := fs.Bool("json", false, "print the task (with --all-matching, the totals) as JSON")
	bf := addBulkFlags(fs, "cancel")
	call, code := a.startOneOrAll(fs, spec, args, api, bf, "TASK (a task id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	if *bf.all {
		if strings.TrimSpace(*reason) == "" {
			return a.fail(spec.name, usagef("--reason is required with --all-matching: say why these tasks are cancelled"))
		}
		return a.runBulk(spec, call, bf, "cancel", *reason, *asJSON)
	}
	pos, c, ctx := call.pos, call.c, call.ctx
	t, err := c.CancelTask(ctx, pos[0], *reason)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(t)
	}
	fmt.Fprintf(a.stdout, "Cancelled task %s: %s\n", t.ID, t.Title)
	return exitOK
}

// startOneOrAll is start for a command that acts on one task (a positional
// TASK) or, with --all-matching, on every task the filter flags match (no
// positional; filter flags only then).
func (a *app) startOneOrAll(fs *flag.FlagSet, spec cmdSpec, args []string, api *string, bf *bulkFlags, what string) (*apiCall, int) {
	pos, code, ok := a.parse(fs, spec, args)
	if !ok {
		return nil, code
	}
	n := 1
	if *bf.all {
		n = 0
	} else if bf.filterSet() || *bf.yes {
		return nil, a.fail(spec.name, usagef("filter flags and --yes go with --all-matching"))
	}
	if !a.want(spec, fs, pos, n, what) {
		return nil, exitUsage
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return nil, a.fail(spec.name, err)
	}
	return &apiCall{pos: pos, c: c, ctx: ctx, cancel: cancel}, 0
}

var tasksAssignSpec = cmdSpec{
	name: "tasks assign", args: "TASK --worker WORKER [--reason TEXT]",
	summary: "Give a pending task to a worker (id, email or name); it stays pending until that worker claims it.",
	example: `taskctl tasks assign 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d --worker alice@example.com --reason "wrote this module"`,
}

func (a *app) tasksAssign(args []string) int {
	spec := tasksAssignSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	worker := fs.String("worker", "", "worker id, email or name (required)")
	reason := fs.String("reason", "", "why this worker")
	asJSON := fs.Bool("json", false, "print the task as JSON")
	pos, code, ok := a.parseArgs(fs, spec, args, 1, "TASK (a task id)")
	if !ok {
		return code
	}
	if *worker == "" {
		return a.fail(spec.name, usagef("--worker is required"))
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	w, err := resolveWorker(ctx, c, *worker)
	if err != nil {
		return a.fail(spec.name, err)
	}
	t, err := c.AssignTask(ctx, pos[0], w.ID, *reason)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(t)
	}
	fmt.Fprintf(a.stdout, "Assigned task %s to %s <%s>.\n", t.ID, w.FullName, w.Email)
	return exitOK
}

var tasksReleaseSpec = cmdSpec{
	name: "tasks release", args: "TASK [--reason TEXT]",
	summary: "Free a blocked task from its dependencies: it becomes pending (claimable) now, whatever they\n" +
		"say. For a task created with --on-dependency-failure wait whose dependency failed for good,\n" +
		"when you would rather run it without that dependency's result than retry the dependency\n" +
		"(taskctl tasks retry DEPENDENCY). Its worker gets the inputs of the dependencies that completed.",
	example: `taskctl tasks release 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d --reason "the StockTwits crawl is enough"`,
}

func (a *app) tasksRelease(args []string) int {
	spec := tasksReleaseSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why, for the record")
	asJSON := fs.Bool("json", false, "print the task as JSON")
	call, code := a.start(fs, spec, args, api, 1, "TASK (a blocked task's id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	t, err := call.c.ReleaseTask(call.ctx, call.pos[0], *reason)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(t)
	}
	fmt.Fprintf(a.stdout, "Released task %s: %s (%s)\nFollow it: taskctl history %s\n", t.ID, t.Title, t.Status, t.ID)
	return exitOK
}

var tasksRetrySpec = cmdSpec{
	name: "tasks retry", args: "TASK [--hint TEXT] | --all-matching FILTER FLAGS [--hint TEXT] [--yes]",
	summary: "Retry a failed task now: a new task is created with the failure's context (and your hint)\n" +
		"for the next attempt, even when the automatic retry skipped it or the retries ran out.\n" +
		"With --all-matching, retry every failed task without a retry that the filter flags match, on\n" +
		"every page: it shows how many first and asks to confirm (--yes skips the question and is\n" +
		"needed when standard input is not a terminal). Progress goes to stderr.",
	example: `taskctl tasks retry 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d --hint "the flaky test is fixed on main; rebase first"
taskctl tasks retry --all-matching --type crawl --status failed --hint "the API rate limit was raised"`,
}

func (a *app) tasksRetry(args []string) int {
	spec := tasksRetrySpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	hint := fs.String("hint", "", "advice for the next attempt")
	fs.StringVar(hint, "reason", "", "the same as --hint")
	asJSON := fs.Bool("json", false, "print the new task (with --all-matching, the totals) as JSON")
	bf := addBulkFlags(fs, "retry")
	call, code := a.startOneOrAll(fs, spec, args, api, bf, "TASK (a failed task's id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	if *bf.all {
		return a.runBulk(spec, call, bf, "retry", *hint, *asJSON)
	}
	pos, c, ctx := call.pos, call.c, call.ctx
	t, err := c.RetryTask(ctx, pos[0], *hint)
	var apiErr *client.Error
	if errors.As(err, &apiErr) && (apiErr.Status == http.StatusMethodNotAllowed ||
		(apiErr.Status == http.StatusNotFound && taskExists(ctx, c, pos[0]))) {
		fmt.Fprintf(a.stderr, "taskctl %s: %s has no manual retry (POST /api/v1/admin/workers/tasks/:id/retry): upgrade task-service\n", spec.name, c.Base())
		return exitFailure
	}
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(t)
	}
	fmt.Fprintf(a.stdout, "Created retry %s (attempt %d) of task %s.\nFollow it: taskctl history %s\n", t.ID, t.RetryCount+1, pos[0], t.ID)
	return exitOK
}
