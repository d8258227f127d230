package projections

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// CountColumns are task_counts' counters, in Counts order. The table has
// one row per server process (pid = pg_backend_pid()), so two transactions
// never wait for the same counter row; the totals are the sums (ADR 010).
var CountColumns = []string{"pending", "queued", "in_progress", "completed", "failed", "cancelled",
	"awaiting_retry", "retries_exhausted", "retries_skipped", "scheduled", "blocked"}

// Counts are task totals, one per CountColumns entry: the one definition of
// what each counter counts. The writers of worker_tasks keep task_counts
// with it (Projector.Task here; the batched claim and completion in the
// store add their statements' deltas the same way) and replay folds it.
type Counts [11]int64

// Add adds sign to every counter that counts t.
func (c *Counts) Add(t *events.Task, sign int64) {
	failed := t.Status == events.StatusFailed
	for i, ok := range [11]bool{
		t.Status == events.StatusPending,
		// queued, the queue depth: claimable now by time and by anyone
		t.Status == events.StatusPending && t.AssignedTo == nil && !t.Scheduled,
		t.Status == events.StatusInProgress,
		t.Status == events.StatusCompleted,
		failed,
		t.Status == events.StatusCancelled,
		failed && t.RetryOutcome == nil, // awaiting the retry reactor's decision
		failed && t.RetryOutcome != nil && *t.RetryOutcome == events.RetryOutcomeExhausted,
		failed && t.RetryOutcome != nil && *t.RetryOutcome == events.RetryOutcomeSkipped,
		t.Status == events.StatusPending && t.Scheduled, // waiting for its run_at
		t.Status == events.StatusBlocked,                // waiting for its dependencies
	} {
		if ok {
			c[i] += sign
		}
	}
}

// CountsDelta is the change of the totals when a task goes from before
// (nil for a new task) to after.
func CountsDelta(before, after *events.Task) Counts {
	var d Counts
	if before != nil {
		d.Add(before, -1)
	}
	d.Add(after, 1)
	return d
}

// addCounts adds a delta to this server process's row of task_counts.
var addCounts = countsInsert(1)

// addCountsAndPending is addCounts ($6 on) and AddPending ($1 to $5) in one
// statement: one execution for the many writes that change both.
var addCountsAndPending = "WITH p AS (" + AddPending + ") " + countsInsert(6)

// countsInsert is the upsert of a delta into task_counts, its parameters
// numbered from first.
func countsInsert(first int) string {
	params, sets := make([]string, len(CountColumns)), make([]string, len(CountColumns))
	for i, c := range CountColumns {
		params[i] = fmt.Sprintf("$%d::bigint", first+i)
		sets[i] = fmt.Sprintf("%s = c.%s + excluded.%s", c, c, c)
	}
	return fmt.Sprintf("INSERT INTO task_counts AS c (pid, %s) VALUES (pg_backend_pid(), %s) ON CONFLICT (pid) DO UPDATE SET %s",
		strings.Join(CountColumns, ", "), strings.Join(params, ", "), strings.Join(sets, ", "))
}

func countsArgs(d Counts) []any {
	args := make([]any, len(d))
	for i, v := range d {
		args[i] = v
	}
	return args
}

// queueCounts queues the change of the totals and of the pending cells
// from before to after; nothing when no counter changes (an update
// posted, an edit of the title).
func queueCounts(b *pgx.Batch, before, after *events.Task) {
	queueCountsAndPending(b, CountsDelta(before, after), PendingDelta(before, after))
}
