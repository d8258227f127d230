package whatif

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/clawdbot/task-service/events"
)

// A compacted task (ADR 035) has one task.compacted event in place of its
// history: the final state, each claim (worker, claim time, duration,
// outcome), the retry decisions, and a worker_offline failure's evidence.
// That is every field the simulation reads, so the events it needs are
// rebuilt from the summary and folded like read ones: a chain simulates the
// same from its summaries as from its events. Compactions written before
// the decisions and the evidence were kept leave a chain unjudged when the
// policy would decide on what they lack (chain.unjudged).

// compactedGroup holds the task.compacted events of one compaction
// transaction, which compacts whole chains: its tasks are folded together,
// each chain in its order, once the transaction's events are read.
type compactedGroup struct {
	tx    int64
	tasks []compactedTask
}

type compactedTask struct {
	id string
	c  events.TaskCompacted
}

func (g *compactedGroup) add(id string, data []byte) error {
	var c events.TaskCompacted
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("what-if: the compaction of task %s: %w", id, err)
	}
	g.tasks = append(g.tasks, compactedTask{id: id, c: c})
	return nil
}

// applyCompacted folds g's tasks, each retry chain from its first task
// along its retries, as the events they stand for that fall in the window,
// and empties g.
func (r *run) applyCompacted(g *compactedGroup, cutoff time.Time) error {
	if len(g.tasks) == 0 {
		return nil
	}
	byID := make(map[string]int, len(g.tasks))
	for i, t := range g.tasks {
		byID[t.id] = i
	}
	done := make([]bool, len(g.tasks))
	fold := func(i int) {
		for i >= 0 && !done[i] {
			done[i] = true
			t := &g.tasks[i]
			r.compactedTasks++
			for _, e := range rebuild(t.id, &t.c) {
				if e.at.Before(cutoff) {
					continue
				}
				r.apply(&e)
				r.events++
			}
			i = -1
			if next := t.c.Task.RetryTaskID; next != nil {
				if j, ok := byID[*next]; ok {
					i = j
				}
			}
		}
	}
	for i, t := range g.tasks {
		if p := t.c.Task.ParentTaskID; p == nil || !inGroup(byID, *p) {
			fold(i)
		}
	}
	for i := range g.tasks {
		fold(i) // a retry whose parent is here but does not name it (never, but fold it anyway)
	}
	g.tasks = g.tasks[:0]
	return nil
}

func inGroup(byID map[string]int, id string) bool {
	_, ok := byID[id]
	return ok
}

// rebuild is the events of the simulation's kinds that a compacted task
// stands for, in their order, with the fields the simulation reads.
func rebuild(id string, c *events.TaskCompacted) []row {
	t := &c.Task
	created := row{task: id, typ: "task.created", at: t.CreatedAt.UTC(), typeID: t.TaskTypeID,
		retryCount: strconv.Itoa(t.RetryCount)}
	if t.ParentTaskID != nil {
		created.parent = *t.ParentTaskID
	}
	avail := t.AvailableAt
	if c.CreatedAvailableAt != nil {
		avail = *c.CreatedAvailableAt
	}
	if !avail.IsZero() {
		created.availableAt = avail.UTC().Format(time.RFC3339Nano)
	}
	out := []row{created}
	for _, a := range c.Attempts {
		out = append(out, row{task: id, typ: "task.claimed", at: a.ClaimedAt.UTC(), worker: a.WorkerID})
		if a.Outcome == "released" {
			out = append(out, row{task: id, typ: "task.released",
				at: a.ClaimedAt.Add(time.Duration(a.DurationMS) * time.Millisecond).UTC()})
		}
	}
	if t.CompletedAt == nil {
		return out
	}
	end := row{task: id, at: t.CompletedAt.UTC()}
	switch t.Status {
	case events.StatusCompleted:
		end.typ = "task.completed"
	case events.StatusCancelled:
		end.typ = "task.cancelled"
	case events.StatusFailed:
		end.typ = "task.failed"
		if t.FailureKind != nil {
			end.kind = *t.FailureKind
		}
		if t.FailureReason != nil {
			end.reason = *t.FailureReason
		}
		if end.kind == events.FailureWorkerOffline {
			if ev := c.Evidence; ev == nil {
				end.unsure |= unsureEvidence
			} else {
				end.lastHeartbeat = ev.LastHeartbeat
				end.offline, end.stuck = nonzero(ev.OfflineThresholdSeconds), nonzero(ev.StuckThresholdSeconds)
			}
		}
	default:
		return out
	}
	out = append(out, end)
	for _, d := range c.Decisions {
		out = append(out, decisionRow(id, d.Outcome, d.At.UTC(), d.Manual, d.Reason, 0))
	}
	if len(c.Decisions) == 0 && t.RetryOutcome != nil {
		// An older compaction: the outcome without the skip's reason or
		// whether the retry was manual.
		unsure := map[string]uint8{events.RetryOutcomeRetried: unsureRetry, events.RetryOutcomeSkipped: unsureSkip}[*t.RetryOutcome]
		out = append(out, decisionRow(id, *t.RetryOutcome, end.at, false, "", unsure))
	}
	return out
}

func decisionRow(id, outcome string, at time.Time, manual bool, reason string, unsure uint8) row {
	e := row{task: id, at: at, reason: reason, unsure: unsure}
	switch outcome {
	case events.RetryOutcomeRetried:
		e.typ = "task.retried"
		if manual {
			e.manual = "true"
		}
	case events.RetryOutcomeSkipped:
		e.typ = "task.retry_skipped"
	default:
		e.typ = "task.retries_exhausted"
	}
	return e
}

func nonzero(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
