package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/whatif"
)

// whatIfFlags are the flags of `taskctl replay --what-if` besides the file.
type whatIfFlags struct {
	since   string
	sample  int
	maxOpen int
	asJSON  bool
}

// whatIf runs `taskctl replay --what-if`: reads the policy file, simulates
// it over the window straight from the database and prints the report.
func (a *app) whatIf(cmd, dbURL, file string, f whatIfFlags) int {
	policy, err := readPolicy(file)
	if err != nil {
		return a.fail(cmd, usagef("%v", err))
	}
	if f.maxOpen < 1 {
		return a.fail(cmd, usagef("--max-open-chains must be at least 1"))
	}
	since, err := whatif.ParseSince(f.since)
	if err != nil {
		return a.fail(cmd, usagef("--since %v", strings.TrimPrefix(err.Error(), "since: ")))
	}
	ctx, cancel := a.signalContext()
	defer cancel()
	pool, err := store.Connect(ctx, dbURL, 2)
	if err != nil {
		return a.fail(cmd, err)
	}
	defer pool.Close()
	progress := newWhatIfProgress(a.stderr, isTerminal(a.stderr))
	rep, err := whatif.Run(ctx, pool, whatif.Config{Policy: policy, Since: since, SampleSize: f.sample,
		MaxOpenChains: f.maxOpen, Progress: progress.update})
	progress.finish()
	var invalid *events.ValidationError
	var open *whatif.OpenChainsError
	switch {
	case errors.As(err, &invalid):
		return a.fail(cmd, usagef("%s: %v", file, err))
	case errors.As(err, &open):
		return a.fail(cmd, fmt.Errorf("--since %s: %w: choose a shorter --since, or raise --max-open-chains if this machine has the memory (about 0.6 KB a chain)", f.since, open))
	case err != nil:
		return a.fail(cmd, err)
	}
	if f.asJSON {
		return a.printJSON(rep)
	}
	a.printWhatIf(rep)
	return exitOK
}

// readPolicy reads and checks a policy file, refusing one too large to be
// a policy before reading it whole.
func readPolicy(file string) (*whatif.Policy, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, 4*whatif.MaxPolicyChars+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	p, err := whatif.ParsePolicy(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

func (a *app) printWhatIf(rep *whatif.Report) {
	fmt.Fprintf(a.stdout, "What-if from %s to %s: %s chains from %s task events in %s (%s events/s).\n",
		rep.Since.Format(time.RFC3339), rep.Until.Format(time.RFC3339), count(rep.Totals.Chains), count(rep.Events),
		(time.Duration(rep.ElapsedSeconds * float64(time.Second))).Round(time.Millisecond), count(int64(rep.EventsPerSec)))
	if rep.Partial > 0 {
		fmt.Fprintf(a.stdout, "%s events belong to chains begun before the window and are not simulated.\n", count(rep.Partial))
	}
	if rep.CompactedTasks > 0 {
		fmt.Fprintf(a.stdout, "%s tasks were simulated from their task.compacted summaries (EVENT_RETENTION, ADR 035).\n", count(rep.CompactedTasks))
	}
	if rep.Totals.NotJudged > 0 {
		fmt.Fprintf(a.stdout, "%s chains were not judged: compacted before their summaries kept what simulating them needs (ADR 030); they are in no other count.\n",
			count(rep.Totals.NotJudged))
	}
	tw := a.table()
	fmt.Fprintln(tw, "TYPE\tCHAINS\tCHANGED\tRETRIED\tNOT RETRIED\tSKIPPED\tNOT SKIPPED\tDETECTOR FAILED\tNOT FAILED\tUNKNOWN\tEARLIER\tLATER\tMEAN TIME CHANGE")
	row := func(name string, c whatif.ChainCounts) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", name, c.Chains, c.Changed, c.Retried, c.NotRetried,
			c.Skipped, c.NotSkipped, c.FailedByDetector, c.NotFailedByDetector, c.OutcomeUnknown, c.Earlier, c.Later,
			signedSeconds(c.MeanTimeChangeSeconds))
	}
	for _, t := range rep.Types {
		row(t.Type, t.ChainCounts)
	}
	row("(all)", rep.Totals)
	tw.Flush()
	fmt.Fprintf(a.stdout, "Outcomes recorded: %s\nOutcomes simulated: %s\n", outcomes(rep.Totals.Recorded), outcomes(rep.Totals.Simulated))
	if rep.Totals.Changed == 0 {
		fmt.Fprintln(a.stdout, "No differences: the policy decides every chain of the window as the log did.")
		return
	}
	fmt.Fprintf(a.stdout, "\nChanged chains (%d of %d shown; \"unknown\": the policy leaves the recorded path, see ADR 030):\n", len(rep.Sample), rep.Totals.Changed)
	for _, c := range rep.Sample {
		fmt.Fprintf(a.stdout, "  %s  %s  %s -> %s  %s%s\n", c.RootTaskID, c.Type, c.Recorded, c.Simulated,
			strings.Join(c.Changes, ","), times(c.RecordedSeconds, c.SimulatedSeconds))
	}
}

func outcomes(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func signedSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}

func times(rec, sim *float64) string {
	show := func(s *float64) string {
		if s == nil {
			return "?"
		}
		return time.Duration(*s * float64(time.Second)).Round(time.Second).String()
	}
	if rec == nil && sim == nil {
		return ""
	}
	return "  time " + show(rec) + " -> " + show(sim)
}

// whatIfProgress shows how far the read is, on standard error.
type whatIfProgress struct {
	w        io.Writer
	terminal bool
	drawn    time.Time
	shown    bool
}

func newWhatIfProgress(w io.Writer, terminal bool) *whatIfProgress {
	return &whatIfProgress{w: w, terminal: terminal}
}

func (p *whatIfProgress) update(done, total int64, elapsed time.Duration) {
	every := 2 * time.Second
	if p.terminal {
		every = 100 * time.Millisecond
	}
	if time.Since(p.drawn) < every {
		return
	}
	p.drawn, p.shown = time.Now(), true
	pct := int64(100)
	if total > 0 {
		pct = 100 * min(done, total) / total
	}
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[Kwhat-if: read %d%% of the window's events  %s", pct, elapsed.Round(100*time.Millisecond))
		return
	}
	fmt.Fprintf(p.w, "what-if: read %d%% of the window's events  %s\n", pct, elapsed.Round(time.Millisecond))
}

func (p *whatIfProgress) finish() {
	if p.shown && p.terminal {
		fmt.Fprintln(p.w)
	}
}
