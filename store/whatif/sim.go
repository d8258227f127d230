package whatif

import (
	"strings"
	"time"

	"github.com/clawdbot/task-service/events"
)

// Outcomes of a retry chain.
const (
	OutcomeOpen      = "open"      // still live at the end of the window
	OutcomeCompleted = "completed" // its last task completed
	OutcomeCancelled = "cancelled"
	OutcomeExhausted = "exhausted" // failed with no retry left
	OutcomeSkipped   = "skipped"   // failed and judged permanent
	// OutcomeUnknown: the policy leaves the recorded path (a retry that
	// never ran, an attempt the detector would not have failed), so the
	// log cannot say how the chain would have ended.
	OutcomeUnknown = "unknown"
)

type endKind uint8

const (
	endNone endKind = iota
	endCompleted
	endFailed
	endCancelled
)

type decision uint8

const (
	decNone      decision = iota // not decided yet
	decRetried                   // the retry reactor retried it
	decManual                    // an admin retried it first
	decExhausted                 // no retry left
	decAdvised                   // the advisor said the failure is permanent
	decFixed                     // skipped for a reason no policy changes (archived type, a held unique key)
)

// attempt is one task of a chain, as much as deciding on it needs.
type attempt struct {
	retryNumber int
	createdAt   time.Time
	availableAt time.Time // zero: claimable at once
	worker      string
	claimedAt   time.Time // zero: not in progress when it ended
	end         endKind
	endAt       time.Time
	failKind    string
	// permanent: the failure's reason matches the policy's skip rules.
	permanent bool
	// The stuck detector's evidence for a worker_offline failure.
	lastHeartbeat        time.Time
	offlineOld, stuckOld time.Duration
	decision             decision
	// unsure flags what a compaction written before ADR 035's what-if
	// fields did not keep (unsureDecision, unsureEvidence).
	unsure uint8
}

// What an attempt rebuilt from an older compaction may lack.
const (
	// unsureSkip: a skip's reason (the advisor's, or one no policy
	// changes), which matters when the type's policy re-decides it.
	unsureSkip uint8 = 1 << iota
	// unsureRetry: whether a retry was the reactor's or an admin's, and
	// whether the reactor had exhausted or skipped the chain before (then
	// the admin's retry starts a chain of its own): the chain's very shape.
	unsureRetry
	// unsureEvidence: the stuck detector's evidence of a worker_offline
	// failure, which matters when the offline threshold changes.
	unsureEvidence
)

// unjudged says whether simulating c needs something its summaries did
// not keep.
func (c *chain) unjudged(tp *TypePolicy, offline *time.Duration) bool {
	for i := range c.attempts {
		u := c.attempts[i].unsure
		if u&unsureRetry != 0 || u&unsureSkip != 0 && tp != nil || u&unsureEvidence != 0 && offline != nil {
			return true
		}
	}
	return false
}

// chain is a task and its retries.
type chain struct {
	root     string
	typeID   string
	attempts []attempt
	ids      []string // its tasks' ids, root first
}

func (c *chain) last() *attempt { return &c.attempts[len(c.attempts)-1] }

// done says whether the recorded chain has reached its final outcome.
func (c *chain) done() bool {
	a := c.last()
	switch a.end {
	case endCompleted, endCancelled:
		return true
	case endFailed:
		return a.decision == decExhausted || a.decision == decAdvised || a.decision == decFixed
	}
	return false
}

// silence is a recorded stretch of a worker's silence: from its last
// heartbeat to when it came back (zero: not within the window).
type silence struct {
	from, to  time.Time
	threshold time.Duration // the offline threshold that noticed it
}

// path is how a chain went, recorded or simulated.
type path struct {
	outcome   string
	retries   int
	detector  int       // attempts the stuck detector failed
	finalAt   time.Time // zero unless the outcome is final and known
	createdAt time.Time
}

// duration is the time to the final outcome; ok false when there is none.
func (p path) duration() (time.Duration, bool) {
	if p.finalAt.IsZero() {
		return 0, false
	}
	return p.finalAt.Sub(p.createdAt), true
}

// sim holds what walking a chain needs beyond the chain itself.
type sim struct {
	silences map[string][]silence
	// maxRetries is each type's current max_retries, for decisions the log
	// never recorded (an attempt the detector would have failed).
	maxRetries map[string]int
	until      time.Time
}

// Defaults for evidence that lacks a threshold (events older than it).
const (
	defaultOffline = 10 * time.Minute
	defaultStuck   = 15 * time.Minute
)

// walk follows a chain under a policy: tp nil and offline nil follow the
// log. Times move by shift, the simulated timeline's lead (or lag) over
// the recorded one: a longer backoff starts the retry later, a longer
// offline threshold fails an attempt later; the wait in the queue after a
// task became claimable is taken as recorded.
func (s *sim) walk(c *chain, tp *TypePolicy, offline *time.Duration) path {
	r := path{outcome: OutcomeOpen, createdAt: c.attempts[0].createdAt}
	var shift time.Duration
	for i := range c.attempts {
		a := &c.attempts[i]
		if i > 0 && tp != nil && tp.RetryBackoffSeconds != nil {
			prev := &c.attempts[i-1]
			old := later(a.createdAt, a.availableAt)
			nw := later(a.createdAt, prev.endAt.Add(events.RetryBackoff(*tp.RetryBackoffSeconds, a.retryNumber)))
			shift += nw.Sub(old)
		}
		end, endAt, kind, fresh := a.end, a.endAt, a.failKind, false
		if end == endFailed && kind == events.FailureWorkerOffline {
			r.detector++
		}
		if offline != nil && !a.claimedAt.IsZero() {
			switch eff, at, delta := s.detector(a, *offline); eff {
			case detNoLonger:
				r.detector--
				r.outcome = OutcomeUnknown
				return r
			case detMoved:
				shift += delta
			case detNew:
				r.detector++
				if end != endNone {
					shift += at.Sub(endAt)
				}
				end, endAt, kind, fresh = endFailed, at, events.FailureWorkerOffline, true
			}
		}
		switch end {
		case endNone:
			return r
		case endCompleted, endCancelled:
			r.outcome = OutcomeCompleted
			if end == endCancelled {
				r.outcome = OutcomeCancelled
			}
			r.finalAt = endAt.Add(shift)
			return r
		}
		switch d := s.decide(c, a, tp, fresh, kind); d {
		case decNone:
			return r
		case decExhausted, decAdvised, decFixed:
			r.outcome = OutcomeExhausted
			if d != decExhausted {
				r.outcome = OutcomeSkipped
			}
			r.finalAt = endAt.Add(shift)
			return r
		default:
			r.retries++
			recorded := a.decision == decRetried || a.decision == decManual
			if recorded && !fresh && i+1 == len(c.attempts) {
				return r // the retry exists but the window ends before its first event
			}
			if fresh || !recorded {
				// A retry the log never ran has no recorded outcome.
				r.outcome = OutcomeUnknown
				return r
			}
		}
	}
	return r
}

// decide is the retry reactor's decision on a failed attempt under tp,
// in the reactor's order: exhausted, skipped, retried. fresh marks a
// failure the log does not have (the simulated detector's).
func (s *sim) decide(c *chain, a *attempt, tp *TypePolicy, fresh bool, kind string) decision {
	if fresh {
		limit := s.maxRetries[c.typeID]
		if tp != nil && tp.MaxRetries != nil {
			limit = *tp.MaxRetries
		}
		if a.retryNumber >= limit {
			return decExhausted
		}
		return decRetried
	}
	if tp == nil || a.decision == decNone || a.decision == decFixed || a.decision == decManual {
		return a.decision
	}
	exhausted := a.decision == decExhausted
	if tp.MaxRetries != nil {
		exhausted = a.retryNumber >= *tp.MaxRetries
	}
	switch {
	case exhausted:
		return decExhausted
	case a.permanent:
		return decAdvised
	case a.decision == decAdvised && (tp.SkipAdvised == nil || *tp.SkipAdvised):
		return decAdvised
	}
	// The advisor is asked only while retries are left: a failure that
	// exhausted its retries in the log had no advice, so it gets the
	// template, as an advisor error would.
	return decRetried
}

type detEffect uint8

const (
	detNone     detEffect = iota
	detNoLonger           // a recorded worker_offline failure would not have happened
	detMoved              // it would have happened at another time (delta)
	detNew                // an attempt would have been failed at a time
)

// detector re-decides the stuck detector's rule for one attempt with
// another offline threshold: a task in progress past the stuck threshold
// whose holder is silent past the offline threshold is failed. Heartbeats
// are not events, so the only silences known are those the recorded
// detector noticed (worker.went_offline, until worker.went_online).
func (s *sim) detector(a *attempt, offline time.Duration) (detEffect, time.Time, time.Duration) {
	if a.end == endFailed && a.failKind == events.FailureWorkerOffline {
		stuck := orDefault(a.stuckOld, defaultStuck)
		from := a.lastHeartbeat
		if from.IsZero() {
			from = a.claimedAt // never heard from: silent since the claim
		}
		old := later(a.claimedAt.Add(stuck), from.Add(orDefault(a.offlineOld, defaultOffline)))
		nw := later(a.claimedAt.Add(stuck), from.Add(offline))
		if back := s.backOnline(a.worker, from); !back.IsZero() && !nw.Before(back) {
			return detNoLonger, time.Time{}, 0
		}
		if nw.Equal(old) {
			return detNone, time.Time{}, 0
		}
		return detMoved, time.Time{}, nw.Sub(old)
	}
	end := a.endAt
	if a.end == endNone {
		end = s.until
	}
	for _, sl := range s.silences[a.worker] {
		if !sl.from.Before(end) {
			break
		}
		if !sl.to.IsZero() && !sl.to.After(a.claimedAt) {
			continue
		}
		from := later(sl.from, a.claimedAt)
		old := later(a.claimedAt.Add(defaultStuck), from.Add(orDefault(sl.threshold, defaultOffline)))
		nw := later(a.claimedAt.Add(defaultStuck), from.Add(offline))
		limit := end
		if !sl.to.IsZero() && sl.to.Before(limit) {
			limit = sl.to
		}
		if nw.Before(old) && nw.Before(limit) {
			return detNew, nw, 0
		}
	}
	return detNone, time.Time{}, 0
}

// backOnline is when worker came back after a silence that began at from;
// zero if it did not within the window.
func (s *sim) backOnline(worker string, from time.Time) time.Time {
	for _, sl := range s.silences[worker] {
		if !sl.to.IsZero() && sl.to.After(from) {
			return sl.to
		}
	}
	return time.Time{}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// fixedSkip says whether a recorded skip's reason is one no retry policy
// changes: the type was archived, or another task held the unique key
// (the reactor's wording in reactors/retry.go).
func fixedSkip(reason string) bool {
	return strings.HasPrefix(reason, "Task type ") && strings.Contains(reason, " is archived") ||
		strings.Contains(reason, "holds the unique key")
}
