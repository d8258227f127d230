package replay

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/projections"
)

// countsTable is the task totals the writers of worker_tasks keep in the
// same statements (ADR 010): a projection of worker_tasks, so replay
// computes it from the folded tasks, rebuilds it and verifies it.
const countsTable = "task_counts"

// countColumns are task_counts' counters, in counts order; the row's key
// (pid, one row per server process) is not compared: only the sums are.
var countColumns = projections.CountColumns

// counts are the totals of task_counts, as the write path defines them.
type counts = projections.Counts

// addFold adds every task of f to c.
func addFold(c *counts, f *fold) {
	for _, t := range f.tasks {
		c.Add(t, 1)
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
