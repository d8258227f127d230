package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/replay/replaytest"
	"github.com/clawdbot/task-service/store/whatif"
)

var replaySpec = cmdSpec{
	name: "replay", args: "[--verify | --from-archive [--verify] | --what-if POLICY.json --since 30d] [--database-url URL] [flags]",
	summary: "Rebuild every projection (users, task_types, worker_tasks, task_titles, worker_task_updates,\n" +
		"task_assignments, task_data, task_checkpoints, schedules, schedule_firings, and the counters and\n" +
		"sums kept beside them: task_counts, schedule_counts, the usage and per-day and per-minute tables)\n" +
		"from the event log, talking to the database directly.\n" +
		"The log is folded one range of streams at a time, so memory does not grow with it.\n\n" +
		"  --verify  fold the log inside one REPEATABLE READ READ ONLY transaction and diff the rows\n" +
		"            both ways against the live tables; print each difference; exit 1 if any.\n" +
		"  --from-archive  check every archive object of the event log against its manifest (a mismatch stops\n" +
		"            it before anything is written), load the archived events into the scratch schema\n" +
		"            replay_archive (replacing an earlier load), and fold the archive plus the live log, each event\n" +
		"            once; with --verify, diff that fold against the live projections and exit 1 on a difference.\n" +
		"            The store is the one task-service uses: DATA_DIR or DATA_S3_BUCKET (and EVENT_PARTITION).\n" +
		"  (none)    rebuild into fresh tables and swap them in. Writers keep going meanwhile: the events\n" +
		"            they append are folded in before the swap, which locks them out for a moment only.\n" +
		"  --what-if POLICY.json  re-run a changed retry and offline policy over the events of the last\n" +
		"            --since (30d, 12h; at most 366d), in memory, writing nothing, and report what would have\n" +
		"            differed: chains retried or not, skipped or not, failed by the stuck detector or not, and\n" +
		"            the time to their final outcome; totals, per type and a sample of changed chains.\n" +
		"            A window that holds more than --max-open-chains chains open at once is refused.\n" +
		"            POLICY.json: {\"worker_offline_after\": \"20m\", \"types\": {\"crawl\": {\"max_retries\": 4,\n" +
		"            \"retry_backoff_seconds\": 30, \"skip_advised\": true, \"skip_reasons\": [\"^invalid input\"]}}};\n" +
		"            a field left out keeps what the log recorded.\n\n" +
		"Progress goes to standard error: a bar with events/s on a terminal, plain lines otherwise.",
	example: "DATABASE_URL=postgres://localhost/taskservice taskctl replay --verify\n" +
		"taskctl replay --what-if policy.json --since 30d\n" +
		"taskctl replay --database-url postgres://localhost/taskservice",
}

func (a *app) replay(args []string) int {
	spec := replaySpec
	fs := flagSet(spec)
	verify := fs.Bool("verify", false, "diff instead of rebuilding (read only)")
	dbURL := fs.String("database-url", a.getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	maxDiffs := fs.Int("max-differences", 100, "differences printed per table (all are counted)")
	whatIf := fs.String("what-if", "", "simulate the policy in this JSON file instead (read only)")
	since := fs.String("since", "30d", "with --what-if: the window, in days (30d) or a duration (12h), at most 366d")
	sample := fs.Int("sample", 20, "with --what-if: changed chains listed (at most 1000)")
	maxOpen := fs.Int("max-open-chains", whatif.DefaultMaxOpenChains,
		"with --what-if: retry chains held in memory at once, about 0.6 KB each; a window that holds more is refused")
	fromArchive := fs.Bool("from-archive", false, "fold the archive plus the live log (see above)")
	kind := fs.String("event-partition", cmp.Or(a.getenv("EVENT_PARTITION"), archive.Day), "with --from-archive: the archive's period, day or week (default $EVENT_PARTITION, else day)")
	seed := fs.Int("seed-synthetic", 0, "benchmarks only: write this many synthetic events into an empty database, then stop")
	_, code, ok := a.parseArgs(fs, spec, args, 0, "")
	if !ok {
		return code
	}
	if *dbURL == "" {
		return a.fail(spec.name, usagef("no database: give --database-url or set DATABASE_URL"))
	}
	if *whatIf != "" {
		return a.whatIf(spec.name, *dbURL, *whatIf, whatIfFlags{since: *since, sample: *sample, maxOpen: *maxOpen, asJSON: *asJSON})
	}
	// The fold of one range of streams is a heap that lives for a while:
	// collecting it less often is faster, and the soft limit keeps the
	// peak bounded whatever the log's size (ADR 010).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(replay.MemoryLimit))
	ctx, cancel := a.signalContext()
	defer cancel()
	pool, err := store.Connect(ctx, *dbURL, 4)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer pool.Close()

	if *seed > 0 {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM task_events LIMIT 1) e`).Scan(&n); err != nil {
			return a.fail(spec.name, err)
		}
		if n > 0 {
			return a.fail(spec.name, usagef("--seed-synthetic writes only into an empty database, and task_events has events"))
		}
		start := time.Now()
		written, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: *seed, Seed: uint64(time.Now().UnixNano())})
		if err != nil {
			return a.fail(spec.name, err)
		}
		fmt.Fprintf(a.stdout, "Wrote %d synthetic events in %s. Build the projections: taskctl replay\n", written, time.Since(start).Round(time.Millisecond))
		return exitOK
	}

	bar := newProgressPrinter(a.stderr, isTerminal(a.stderr))
	vcfg := replay.VerifyConfig{Progress: bar.update, MaxDifferences: *maxDiffs}
	if *fromArchive {
		if _, err := archive.ParseKind(*kind); err != nil {
			return a.fail(spec.name, usagef("--event-partition: %v", err))
		}
		bs, err := a.blobEnv(ctx)
		if err != nil {
			return a.fail(spec.name, err)
		}
		load, err := replay.LoadArchive(ctx, pool, bs, *kind)
		if err != nil {
			return a.fail(spec.name, err)
		}
		fmt.Fprintf(a.stderr, "Loaded %s archived events of %d periods into schema %s in %s.\n", count(load.Events), len(load.Periods),
			replay.ArchiveSchema, load.Elapsed.Round(time.Millisecond))
		vcfg.EventsSchema = replay.ArchiveSchema
	}
	if *verify || *fromArchive {
		rep, err := replay.Verify(ctx, pool, vcfg)
		bar.finish()
		if err != nil {
			return a.fail(spec.name, err)
		}
		if *asJSON {
			if code := a.printJSON(rep); code != exitOK {
				return code
			}
		} else {
			a.printVerify(rep)
		}
		if !rep.Clean() && *verify {
			return exitFailure
		}
		return exitOK
	}
	rep, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{Progress: bar.update})
	bar.finish()
	if errors.Is(err, replay.ErrBusy) {
		fmt.Fprintf(a.stderr, "taskctl replay: %v; wait for it to finish\n", err)
		return exitFailure
	}
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(rep)
	}
	fmt.Fprintf(a.stdout, "Rebuilt the projections from %s events (+%s appended meanwhile) in %s (%s events/s); writers waited %s.\n",
		count(rep.Events), count(rep.CaughtUp), rep.Elapsed.Round(time.Millisecond),
		count(int64(float64(rep.Events)/rep.Elapsed.Seconds())), rep.LockHeld.Round(time.Millisecond))
	tw := a.table()
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, t := range tableOrder(rep.Rows) {
		fmt.Fprintf(tw, "%s\t%d\n", t, rep.Rows[t])
	}
	tw.Flush()
	fmt.Fprintln(a.stdout, "Check it: taskctl replay --verify")
	return exitOK
}

func (a *app) printVerify(rep *replay.Report) {
	fmt.Fprintf(a.stdout, "Verified %s events in %s (%s events/s).\n", count(rep.Events), rep.Elapsed.Round(time.Millisecond),
		count(int64(float64(rep.Events)/rep.Elapsed.Seconds())))
	tw := a.table()
	fmt.Fprintln(tw, "TABLE\tROWS\tONLY LIVE\tONLY EVENTS")
	for _, t := range tableOrder(rep.Tables) {
		td := rep.Tables[t]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", t, td.Rows, td.LiveRows, td.FoldRows)
	}
	tw.Flush()
	if rep.Clean() {
		fmt.Fprintln(a.stdout, "No differences: every projection equals the fold of the events.")
		return
	}
	fmt.Fprintf(a.stdout, "\nDifferences (a projection that is not the fold of the events is a bug; `taskctl replay` rebuilds it):\n")
	for _, d := range rep.Differences {
		fmt.Fprintln(a.stdout, "  "+describe(d))
	}
	if rep.Truncated {
		fmt.Fprintln(a.stdout, "  … more than printed; raise --max-differences or see --json")
	}
}

// describe says what differs in one line.
func describe(d replay.Difference) string {
	show := func(vals []*string) string {
		var parts []string
		for i, c := range d.Columns {
			parts = append(parts, c+"="+quoteValue(vals[i]))
		}
		return clip(strings.Join(parts, " "), 300)
	}
	switch d.Side {
	case replay.Changed:
		var parts []string
		for _, c := range d.Changed {
			i := columnIndex(d.Columns, c)
			parts = append(parts, fmt.Sprintf("%s: live %s, events %s", c, clip(quoteValue(d.Live[i]), 80), clip(quoteValue(d.Events[i]), 80)))
		}
		return fmt.Sprintf("%s %s changed: %s", d.Table, d.Key, strings.Join(parts, "; "))
	case replay.LiveOnly:
		return fmt.Sprintf("%s %s is live but no event produces it: %s", d.Table, d.Key, show(d.Live))
	default:
		return fmt.Sprintf("%s %s is missing from the live table: %s", d.Table, d.Key, show(d.Events))
	}
}

func quoteValue(v *string) string {
	if v == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", *v)
}

func columnIndex(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// tableOrder lists the tables in the order replay writes them.
func tableOrder[V any](m map[string]V) []string {
	var out []string
	for _, t := range []string{"users", "task_types", "worker_tasks", "task_titles", "worker_task_updates", "task_assignments"} {
		if _, ok := m[t]; ok {
			out = append(out, t)
		}
	}
	for t := range m {
		if columnIndex(out, t) < 0 {
			out = append(out, t)
		}
	}
	return out
}

// count writes 1234567 as 1,234,567.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// progressPrinter draws replay's progress: a bar redrawn in place on a
// terminal, a plain line every few seconds and at each phase's end
// otherwise (logs, CI).
type progressPrinter struct {
	w        io.Writer
	terminal bool
	last     replay.Progress
	shown    replay.Progress // what the last line said
	drawn    time.Time
	active   bool
}

func newProgressPrinter(w io.Writer, terminal bool) *progressPrinter {
	return &progressPrinter{w: w, terminal: terminal}
}

func (p *progressPrinter) update(pr replay.Progress) {
	if p.active && pr.Phase != p.last.Phase {
		p.endPhase()
	}
	p.last, p.active = pr, true
	every := 2 * time.Second
	if p.terminal {
		every = 100 * time.Millisecond
	}
	if pr.Done == 0 && pr.Total == 0 && !p.terminal {
		return // a short phase of unknown size: its end line is enough
	}
	if time.Since(p.drawn) < every && pr.Done != 0 {
		return
	}
	p.draw()
}

func (p *progressPrinter) finish() {
	if p.active {
		p.endPhase()
	}
}

func (p *progressPrinter) endPhase() {
	if p.last != p.shown {
		p.draw()
	}
	if p.terminal {
		fmt.Fprintln(p.w)
	}
	p.active = false
}

func (p *progressPrinter) draw() {
	p.drawn, p.shown = time.Now(), p.last
	pr := p.last
	unit := map[string]string{"ranges": "events", "read": "events", "catch-up": "events", "write": "rows", "index": "tables", "diff": "tables", "swap": "steps"}[pr.Phase]
	amount := count(pr.Done)
	if pr.Total > 0 {
		amount += "/" + count(pr.Total)
	}
	rate := ""
	if unit == "events" || unit == "rows" {
		rate = fmt.Sprintf("  %s %s/s", count(int64(pr.Rate)), unit)
	}
	if !p.terminal {
		fmt.Fprintf(p.w, "replay: %s %s %s%s  %s\n", pr.Phase, amount, unit, rate, pr.Elapsed.Round(time.Millisecond))
		return
	}
	bar := ""
	if pr.Total > 0 {
		const width = 30
		filled := int(float64(width) * float64(min(pr.Done, pr.Total)) / float64(pr.Total))
		bar = fmt.Sprintf("[%s%s] %3d%% ", strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*min(pr.Done, pr.Total)/pr.Total)
	}
	fmt.Fprintf(p.w, "\r\033[K%-8s %s%s %s%s  %s", pr.Phase, bar, amount, unit, rate, pr.Elapsed.Round(100*time.Millisecond))
}
