package main

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/timing"
)

var schedulesCommand = group("schedules", "Recurring work: a task template fired on an interval, a cron expression in a time zone, or once.", map[string]subcommand{
	"create":     {"create a schedule", (*app).schedulesCreate},
	"list":       {"list schedules (--state, --type)", (*app).schedulesList},
	"show":       {"show a schedule with its stats", (*app).schedulesShow},
	"update":     {"change a schedule (only the flags given)", (*app).schedulesUpdate},
	"pause":      {"pause an active schedule", func(a *app, args []string) int { return a.scheduleAction("pause", args) }},
	"resume":     {"resume a paused schedule", func(a *app, args []string) int { return a.scheduleAction("resume", args) }},
	"cancel":     {"cancel a schedule for good", func(a *app, args []string) int { return a.scheduleAction("cancel", args) }},
	"run":        {"run a schedule now, once", (*app).schedulesRun},
	"executions": {"a schedule's executions, newest first", (*app).schedulesExecutions},
})

// scheduleFlags are the flags create and update share.
type scheduleFlags struct {
	name, typeRef, title, description, params, priority, assign *string
	every, cron, tz, start, end, overlap                        *string
	maxRuns, maxFailures                                        *int
}

func addScheduleFlags(fs *flag.FlagSet) *scheduleFlags {
	return &scheduleFlags{
		name:        fs.String("name", "", "the schedule's name (default: the title)"),
		typeRef:     fs.String("type", "", "task type name or id"),
		title:       fs.String("title", "", "title of each task"),
		description: fs.String("description", "", "description of each task"),
		params:      fs.String("params", "", "params of each task, a JSON object (checked against the type's schema)"),
		priority:    fs.String("priority", "", "urgent, high, medium (default) or low"),
		assign:      fs.String("assign", "", "give each task to this worker (id, email or name)"),
		every:       fs.String("every", "", "interval: 30m, 2h, 1d (minutes, hours, days; at least 1m)"),
		cron:        fs.String("cron", "", `cron expression, e.g. "0 6 * * 1-5" (weekdays at 06:00) or @daily`),
		tz:          fs.String("tz", "", "IANA time zone of the cron expression and of day intervals, e.g. Europe/Berlin (default UTC)"),
		start:       fs.String("start", "", "first due time, RFC 3339 (alone: a one-time schedule)"),
		end:         fs.String("end", "", "no firing after this time, RFC 3339"),
		overlap:     fs.String("overlap", "", "skip (default): no firing while the previous execution runs; allow"),
		maxRuns:     fs.Int("max-runs", 0, "stop after this many firings (0: no limit)"),
		maxFailures: fs.Int("max-failures", -1, "pause after this many failed executions in a row (default 3; 0: never)"),
	}
}

var everyPattern = regexp.MustCompile(`^([0-9]+)\s*(s|m|h|d)$`)

// parseEvery reads 30m, 2h, 1d.
func parseEvery(s string) (*events.Interval, error) {
	m := everyPattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return nil, usagef("--every %q: give a number and a unit, e.g. 30m, 2h or 1d", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return nil, usagef("--every %q: %v", s, err)
	}
	unit := map[string]string{"s": events.UnitSeconds, "m": events.UnitMinutes, "h": events.UnitHours, "d": events.UnitDays}[m[2]]
	return &events.Interval{Every: n, Unit: unit}, nil
}

func parseTimeFlag(name, s string) (*time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, usagef("--%s %q is not an RFC 3339 time (like 2026-12-01T06:00:00+01:00)", name, s)
	}
	return &t, nil
}

// fields turns the flags the user set into the API's JSON fields.
func (f *scheduleFlags) fields(ctx context.Context, c *client.Client, set map[string]bool) (map[string]any, error) {
	out := map[string]any{}
	task := map[string]any{}
	if set["name"] {
		out["name"] = *f.name
	}
	if set["type"] {
		tt, err := resolveType(ctx, c, *f.typeRef)
		if err != nil {
			return nil, err
		}
		task["task_type_id"] = tt.ID
	}
	if set["title"] {
		task["title"] = *f.title
	}
	if set["description"] {
		task["description"] = *f.description
	}
	if set["params"] {
		p, err := jsonArg(*f.params, "", "params")
		if err != nil {
			return nil, err
		}
		task["params"] = p
	}
	if set["priority"] {
		task["priority"] = *f.priority
	}
	if set["assign"] {
		task["assigned_to"] = ""
		if *f.assign != "" {
			w, err := resolveWorker(ctx, c, *f.assign)
			if err != nil {
				return nil, err
			}
			task["assigned_to"] = w.ID
		}
	}
	if len(task) > 0 {
		out["task"] = task
	}
	if set["every"] {
		iv, err := parseEvery(*f.every)
		if err != nil {
			return nil, err
		}
		out["interval"] = iv
	}
	if set["cron"] {
		out["cron"] = *f.cron
	}
	if set["tz"] {
		out["time_zone"] = *f.tz
	}
	for flagName, field := range map[string]string{"start": "start_at", "end": "end_at"} {
		if !set[flagName] {
			continue
		}
		v := *f.start
		if flagName == "end" {
			v = *f.end
		}
		if v == "" {
			out[field] = nil
			continue
		}
		at, err := parseTimeFlag(flagName, v)
		if err != nil {
			return nil, err
		}
		out[field] = at
	}
	if set["overlap"] {
		out["overlap"] = *f.overlap
	}
	if set["max-runs"] {
		out["max_runs"] = *f.maxRuns
	}
	if set["max-failures"] {
		out["max_failures"] = *f.maxFailures
	}
	return out, nil
}

func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

var schedulesCreateSpec = cmdSpec{
	name: "schedules create", args: "--type TYPE --title TITLE (--every N{m,h,d} | --cron EXPR [--tz ZONE] | --start TIME) [flags]",
	summary: "Create a schedule: each firing creates a task from the template (type, title, params...).\n" +
		"Give an interval (--every), a cron expression (--cron, in --tz), or only --start for a one-time run.\n" +
		"Missed firings after downtime fire once, counting what they missed.",
	example: `taskctl schedules create --name "NVDA crawl" --type reddit_crawl --title "Reddit crawl for NVDA" \
  --params '{"ticker": "NVDA", "days": 1}' --cron "0 6 * * 1-5" --tz Europe/Berlin`,
}

func (a *app) schedulesCreate(args []string) int {
	spec := schedulesCreateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	f := addScheduleFlags(fs)
	asJSON := fs.Bool("json", false, "print the schedule as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	set := setFlags(fs)
	if !set["type"] || !set["title"] {
		return a.fail(spec.name, usagef("--type and --title are required"))
	}
	fields, err := f.fields(call.ctx, call.c, set)
	if err != nil {
		return a.fail(spec.name, err)
	}
	var s events.Schedule
	if err := call.c.Do(call.ctx, "POST", "/api/v1/admin/schedules", fields, &s); err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(s)
	}
	fmt.Fprintf(a.stdout, "Created schedule %q (%s), id %s; next firing %s.\nWatch it: taskctl schedules show %s\n",
		s.Name, timing.Describe(s.ScheduleTiming), s.ID, fmtTimePtr(s.NextDueAt), s.ID)
	return exitOK
}

var schedulesListSpec = cmdSpec{
	name: "schedules list", args: "[--state STATE] [--type TYPE] [--json]",
	summary: "List schedules, newest first.",
	example: "taskctl schedules list --state active",
}

func (a *app) schedulesList(args []string) int {
	spec := schedulesListSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	state := fs.String("state", "", "active, paused, cancelled or finished")
	typeRef := fs.String("type", "", "task type name or id")
	limit := fs.Int("limit", 100, "at most this many (1-500)")
	asJSON := fs.Bool("json", false, "print the schedules as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	q := client.ScheduleQuery{State: *state, Limit: *limit}
	if *typeRef != "" {
		tt, err := resolveType(call.ctx, call.c, *typeRef)
		if err != nil {
			return a.fail(spec.name, err)
		}
		q.TaskTypeID = tt.ID
	}
	list, err := call.c.Schedules(call.ctx, q)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(list)
	}
	n := loadNames(call.ctx, call.c)
	tw := a.table()
	fmt.Fprintln(tw, "NAME\tSTATE\tWHEN\tTYPE\tNEXT\tRUNS\tID")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", clip(s.Name, 40), s.State, clip(timing.Describe(s.ScheduleTiming), 40),
			n.taskType(s.Task.TaskTypeID), fmtTimePtr(s.NextDueAt), s.Runs, s.ID)
	}
	tw.Flush()
	if len(list) == 0 {
		fmt.Fprintln(a.stdout, "(no schedules: taskctl schedules create --help)")
	}
	return exitOK
}

// startOnSchedule starts a command whose one argument names a schedule (by
// name or id) and finds it. call is nil when the command ends here, with
// code; otherwise the caller cancels call.
func (a *app) startOnSchedule(fs *flag.FlagSet, spec cmdSpec, args []string, api *string) (*apiCall, *events.Schedule, int) {
	call, code := a.start(fs, spec, args, api, 1, "SCHEDULE (a name or id)")
	if call == nil {
		return nil, nil, code
	}
	s, err := resolveSchedule(call.ctx, call.c, call.pos[0])
	if err != nil {
		call.cancel()
		return nil, nil, a.fail(spec.name, err)
	}
	return call, s, 0
}

// resolveSchedule finds a schedule by id or by exact name.
func resolveSchedule(ctx context.Context, c *client.Client, ref string) (*events.Schedule, error) {
	if isUUID(ref) {
		return c.Schedule(ctx, ref)
	}
	list, err := c.Schedules(ctx, client.ScheduleQuery{Limit: 500})
	if err != nil {
		return nil, err
	}
	var found []events.Schedule
	for _, s := range list {
		if s.Name == ref {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 1:
		return &found[0], nil
	case 0:
		return nil, usagef("no schedule named %q (give its name or id); see `taskctl schedules list`", ref)
	}
	return nil, usagef("%d schedules are named %q: give the id instead", len(found), ref)
}

var schedulesShowSpec = cmdSpec{
	name: "schedules show", args: "SCHEDULE [--json]",
	summary: "Show a schedule (by name or id): template, timing, state and stats.",
	example: `taskctl schedules show "NVDA crawl"`,
}

func (a *app) schedulesShow(args []string) int {
	spec := schedulesShowSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the schedule and its stats as JSON")
	call, s, code := a.startOnSchedule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	st, err := call.c.ScheduleStats(call.ctx, s.ID)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(map[string]any{"schedule": s, "stats": st})
	}
	n := loadNames(call.ctx, call.c)
	tw := a.table()
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Schedule", s.Name)
	row("ID", s.ID)
	row("State", string(s.State))
	if s.PausedReason != "" {
		row("Paused because", s.PausedReason)
	}
	row("When", timing.Describe(s.ScheduleTiming))
	row("Time zone", s.TimeZone)
	row("Next firing", fmtTimePtr(s.NextDueAt))
	row("Overlap", s.Overlap)
	row("Pause after", fmt.Sprintf("%d failed executions in a row (0: never)", s.MaxFailures))
	row("Task", fmt.Sprintf("%q of type %s, %s", s.Task.Title, n.taskType(s.Task.TaskTypeID), s.Task.Priority))
	row("Params", string(s.Task.Params))
	row("Runs", fmt.Sprintf("%d (completed %d, failed %d, cancelled %d, unfinished %d); skipped %d; failed firings %d",
		st.Runs, st.Completed, st.Failed, st.Cancelled, st.Unfinished, st.Skipped, st.FireFailures))
	if st.SuccessRate != nil {
		row("Success rate", fmt.Sprintf("%.0f %%", *st.SuccessRate*100))
	}
	// The average counts every execution; the p95 only the kept history,
	// which may hold none.
	if st.AvgDurationSeconds != nil {
		d := "avg " + secondsF(*st.AvgDurationSeconds)
		if st.P95DurationSeconds != nil {
			d += ", p95 " + secondsF(*st.P95DurationSeconds)
		}
		row("Duration", d)
	}
	if lf := st.LastFailure; lf != nil {
		row("Last failure", fmt.Sprintf("run #%d %s: %s (task %s)", lf.Run, fmtTime(lf.At), clip(lf.Reason, 80), lf.TaskID))
	}
	row("Created", fmtTime(s.CreatedAt))
	tw.Flush()
	return exitOK
}

func secondsF(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

var schedulesUpdateSpec = cmdSpec{
	name: "schedules update", args: "SCHEDULE [flags]",
	summary: "Change a schedule: only the flags given change (--start '' clears start_at).\n" +
		"A new interval replaces a cron expression and the other way round.",
	example: `taskctl schedules update "NVDA crawl" --every 2h --priority high`,
}

func (a *app) schedulesUpdate(args []string) int {
	spec := schedulesUpdateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	f := addScheduleFlags(fs)
	asJSON := fs.Bool("json", false, "print the schedule as JSON")
	call, s, code := a.startOnSchedule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	set := setFlags(fs)
	delete(set, "api")
	delete(set, "json")
	fields, err := f.fields(call.ctx, call.c, set)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if len(fields) == 0 {
		return a.fail(spec.name, usagef("nothing to change: give at least one flag (see --help)"))
	}
	after, err := call.c.UpdateSchedule(call.ctx, s.ID, fields)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(after)
	}
	fmt.Fprintf(a.stdout, "Updated schedule %q (%s); next firing %s.\n", after.Name, timing.Describe(after.ScheduleTiming), fmtTimePtr(after.NextDueAt))
	return exitOK
}

func (a *app) scheduleAction(action string, args []string) int {
	spec := cmdSpec{name: "schedules " + action, args: "SCHEDULE [--reason TEXT]",
		summary: map[string]string{
			"pause":  "Pause an active schedule: nothing fires until it is resumed.",
			"resume": "Resume a paused schedule from its next slot (slots missed while paused do not fire).",
			"cancel": "Cancel an active or paused schedule for good.",
		}[action],
		example: fmt.Sprintf(`taskctl schedules %s "NVDA crawl"`, action)}
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why (pause and cancel)")
	asJSON := fs.Bool("json", false, "print the schedule as JSON")
	call, s, code := a.startOnSchedule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	r := *reason
	if action == "resume" {
		r = ""
	}
	after, err := call.c.ScheduleAction(call.ctx, s.ID, action, r)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(after)
	}
	fmt.Fprintf(a.stdout, "Schedule %q is %s; next firing %s.\n", after.Name, after.State, fmtTimePtr(after.NextDueAt))
	return exitOK
}

var schedulesRunSpec = cmdSpec{
	name: "schedules run", args: "SCHEDULE [--json]",
	summary: "Run a schedule now, once: a task from its template. The regular times do not move.",
	example: `taskctl schedules run "NVDA crawl"`,
}

func (a *app) schedulesRun(args []string) int {
	spec := schedulesRunSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the schedule and the task as JSON")
	call, s, code := a.startOnSchedule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	run, err := call.c.RunSchedule(call.ctx, s.ID)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(run)
	}
	fmt.Fprintf(a.stdout, "Run #%d of %q: task %s.\nFollow it: taskctl history %s\n", *run.Task.ScheduleRun, s.Name, run.Task.ID, run.Task.ID)
	return exitOK
}

var schedulesExecutionsSpec = cmdSpec{
	name: "schedules executions", args: "SCHEDULE [--before N] [--limit N] [--json]",
	summary: "A schedule's executions, newest first: each firing's task and how its retry chain ended.",
	example: `taskctl schedules executions "NVDA crawl" --limit 20`,
}

func (a *app) schedulesExecutions(args []string) int {
	spec := schedulesExecutionsSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	before := fs.Int("before", 0, "start below this run number (the next page)")
	limit := fs.Int("limit", 50, "at most this many (1-500)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	call, s, code := a.startOnSchedule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	page, err := call.c.ScheduleExecutions(call.ctx, s.ID, *before, *limit)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(page)
	}
	tw := a.table()
	fmt.Fprintln(tw, "RUN\tTASK\tOUTCOME\tATTEMPTS\tSTARTED\tFINISHED\tTOOK\tFAILURE")
	for _, e := range page.Executions {
		took := "-"
		if e.DurationSeconds != nil {
			took = secondsF(*e.DurationSeconds)
		}
		failure := "-"
		if e.FailureReason != nil {
			failure = clip(*e.FailureReason, 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Run, e.TaskID, e.Outcome, e.Attempts,
			fmtTimePtr(e.StartedAt), fmtTimePtr(e.FinishedAt), took, failure)
	}
	tw.Flush()
	if page.NextBefore != nil {
		fmt.Fprintf(a.stdout, "More: taskctl schedules executions %s --before %d\n", s.ID, *page.NextBefore)
	}
	return exitOK
}
