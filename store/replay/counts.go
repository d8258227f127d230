package replay

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// countsTable is the task totals the write path keeps by trigger
// (migration 005, ADR 010): a projection of worker_tasks, so replay
// computes it from the folded tasks, rebuilds it and verifies it.
const countsTable = "task_counts"

// countColumns are task_counts' counters, in counts order; the row's key
// (pid, one row per server process) is not compared: only the sums are.
var countColumns = []string{"pending", "queued", "in_progress", "completed", "failed", "cancelled",
	"awaiting_retry", "retries_exhausted", "retries_skipped"}

// counts are the totals of task_counts, as the trigger function
// task_counts_apply defines them.
type counts [9]int64

func (c *counts) add(t *events.Task, sign int64) {
	failed := t.Status == events.StatusFailed
	for i, ok := range [9]bool{
		t.Status == events.StatusPending,
		t.Status == events.StatusPending && t.AssignedTo == nil,
		t.Status == events.StatusInProgress,
		t.Status == events.StatusCompleted,
		failed,
		t.Status == events.StatusCancelled,
		failed && t.RetryOutcome == nil,
		failed && t.RetryOutcome != nil && *t.RetryOutcome == events.RetryOutcomeExhausted,
		failed && t.RetryOutcome != nil && *t.RetryOutcome == events.RetryOutcomeSkipped,
	} {
		if ok {
			c[i] += sign
		}
	}
}

func (c *counts) addFold(f *fold) {
	for _, t := range f.tasks {
		c.add(t, 1)
	}
}

// sumCounts is the live totals of task_counts in the schema given.
func sumCounts(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (counts, error) {
	var c counts
	sums := make([]string, len(countColumns))
	dest := make([]any, len(countColumns))
	for i, col := range countColumns {
		sums[i] = "coalesce(sum(" + col + "), 0)"
		dest[i] = &c[i]
	}
	err := q.QueryRow(ctx, `SELECT `+strings.Join(sums, ", ")+` FROM `+pgx.Identifier{schema, countsTable}.Sanitize()).Scan(dest...)
	if err != nil {
		return c, fmt.Errorf("read %s: %w", countsTable, err)
	}
	return c, nil
}

// countsText renders counts as the text values of a Difference.
func countsText(c counts) []*string {
	out := make([]*string, len(c))
	for i, v := range c {
		s := fmt.Sprint(v)
		out[i] = &s
	}
	return out
}
