package whatif

import (
	"encoding/json"
	"sort"
	"time"
)

// Report says what the policy would have changed over the window.
type Report struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Policy is the policy simulated, as ParsePolicy reads it.
	Policy json.RawMessage `json:"policy"`
	// Events is how many task events the run read; Elapsed how long it took.
	Events         int64   `json:"events"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	EventsPerSec   float64 `json:"events_per_second"`
	// Partial counts task events of chains that began before the window,
	// which are not simulated.
	Partial int64 `json:"partial_events"`
	// CompactedTasks counts the tasks simulated from their task.compacted
	// summary (ADR 035) rather than their events; Events and Partial count
	// the events such a summary stands for.
	CompactedTasks int64        `json:"compacted_tasks"`
	Totals         ChainCounts  `json:"totals"`
	Types          []TypeCounts `json:"types"`
	// Sample lists changed chains, the first SampleSize by their first
	// task's creation (then its id).
	Sample []ChangedChain `json:"sample"`
}

// ChainCounts tally chains (a task and its retries, by the first task created
// within the window).
type ChainCounts struct {
	Chains  int64 `json:"chains"`
	Changed int64 `json:"changed"`
	// Retried: chains with more retries under the policy; NotRetried, fewer.
	Retried    int64 `json:"retried"`
	NotRetried int64 `json:"not_retried"`
	// Skipped: chains that would have ended skipped (a permanent failure)
	// and did not; NotSkipped the other way.
	Skipped    int64 `json:"skipped"`
	NotSkipped int64 `json:"not_skipped"`
	// FailedByDetector: chains with more attempts failed by the stuck
	// detector (kind worker_offline); NotFailedByDetector, fewer.
	FailedByDetector    int64 `json:"failed_by_detector"`
	NotFailedByDetector int64 `json:"not_failed_by_detector"`
	// OutcomeUnknown: chains whose simulated path leaves what the log
	// recorded, so their final outcome cannot be known.
	OutcomeUnknown int64 `json:"outcome_unknown"`
	// NotJudged counts chains left out of every other count: rebuilt from
	// compactions written before they kept what simulating them needs
	// (whether a retry was manual, and so where a chain ends; a skip's
	// reason, when the type's policy re-decides it; the stuck detector's
	// evidence, when the offline threshold changes), so the simulation
	// cannot tell what their events would have. Such a chain is counted as
	// its summaries link it: an admin's retry after the reactor's decision
	// is in it, where the events make it a chain of its own.
	NotJudged int64 `json:"not_judged"`
	// Recorded and Simulated count the chains by outcome.
	Recorded  map[string]int64 `json:"recorded_outcomes"`
	Simulated map[string]int64 `json:"simulated_outcomes"`
	// TimeCompared counts chains with a known final outcome both ways;
	// Earlier and Later those whose time to it moves; MeanTimeChange is
	// the mean move over TimeCompared, in seconds (negative: sooner).
	TimeCompared          int64   `json:"time_compared"`
	Earlier               int64   `json:"earlier"`
	Later                 int64   `json:"later"`
	MeanTimeChangeSeconds float64 `json:"mean_time_change_seconds"`
	timeChange            time.Duration
}

// TypeCounts are one task type's counts.
type TypeCounts struct {
	Type string `json:"type"`
	ChainCounts
}

// ChangedChain is one chain that the policy changes.
type ChangedChain struct {
	RootTaskID string `json:"root_task_id"`
	Type       string `json:"type"`
	Recorded   string `json:"recorded_outcome"`
	Simulated  string `json:"simulated_outcome"`
	// What changed: retried, not_retried, skipped, not_skipped,
	// failed_by_detector, not_failed_by_detector, outcome, time.
	Changes []string `json:"changes"`
	// Time to the final outcome in seconds, when known.
	RecordedSeconds  *float64 `json:"recorded_seconds,omitempty"`
	SimulatedSeconds *float64 `json:"simulated_seconds,omitempty"`
}

// tally compares a chain's recorded and simulated paths into c and says
// what changed.
func (c *ChainCounts) tally(rec, sim path) []string {
	c.Chains++
	if c.Recorded == nil {
		c.Recorded, c.Simulated = map[string]int64{}, map[string]int64{}
	}
	c.Recorded[rec.outcome]++
	c.Simulated[sim.outcome]++
	var changes []string
	note := func(n *int64, what string) {
		*n++
		changes = append(changes, what)
	}
	switch {
	case sim.retries > rec.retries:
		note(&c.Retried, "retried")
	case sim.retries < rec.retries:
		note(&c.NotRetried, "not_retried")
	}
	switch {
	case sim.outcome == OutcomeSkipped && rec.outcome != OutcomeSkipped:
		note(&c.Skipped, "skipped")
	case rec.outcome == OutcomeSkipped && sim.outcome != OutcomeSkipped:
		note(&c.NotSkipped, "not_skipped")
	}
	switch {
	case sim.detector > rec.detector:
		note(&c.FailedByDetector, "failed_by_detector")
	case sim.detector < rec.detector:
		note(&c.NotFailedByDetector, "not_failed_by_detector")
	}
	if sim.outcome != rec.outcome {
		changes = append(changes, "outcome")
		if sim.outcome == OutcomeUnknown {
			c.OutcomeUnknown++
		}
	}
	rd, rok := rec.duration()
	sd, sok := sim.duration()
	if rok && sok {
		c.TimeCompared++
		c.timeChange += sd - rd
		c.MeanTimeChangeSeconds = c.timeChange.Seconds() / float64(c.TimeCompared)
		switch {
		case sd < rd:
			note(&c.Earlier, "time")
		case sd > rd:
			note(&c.Later, "time")
		}
	}
	if len(changes) > 0 {
		c.Changed++
	}
	return changes
}

func newChange(c *chain, typeName string, rec, sim path, changes []string) ChangedChain {
	ch := ChangedChain{RootTaskID: c.root, Type: typeName, Recorded: rec.outcome, Simulated: sim.outcome, Changes: changes}
	if d, ok := rec.duration(); ok {
		s := d.Seconds()
		ch.RecordedSeconds = &s
	}
	if d, ok := sim.duration(); ok {
		s := d.Seconds()
		ch.SimulatedSeconds = &s
	}
	return ch
}

func sortedTypes(m map[string]*ChainCounts) []TypeCounts {
	out := make([]TypeCounts, 0, len(m))
	for name, c := range m {
		out = append(out, TypeCounts{Type: name, ChainCounts: *c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
