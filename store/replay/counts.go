package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// pendingTable is the open backlog per cell (migration 040, ADR 031),
// kept like task_counts and folded the same way: replay computes it from
// the folded tasks (projections.PendingCounts), writes it as pid 0 rows
// and compares the sums per cell.
const pendingTable = "pending_counts"

// addPendingFold adds every task of f to c.
func addPendingFold(c projections.PendingCounts, f *fold) {
	for _, t := range f.tasks {
		c.Add(t, 1)
	}
}

// addPending adds c to the pid 0 rows of pending_counts in schema; load
// inserts them (merge false: the table is empty and has no index yet),
// each catch-up merges.
func addPending(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, schema string, c projections.PendingCounts, merge bool) error {
	if len(c) == 0 {
		return nil
	}
	sql := strings.Replace(strings.Replace(projections.AddPending, "pg_backend_pid()", "0", 1),
		"INSERT INTO pending_counts", "INSERT INTO "+pgx.Identifier{schema, pendingTable}.Sanitize(), 1)
	if !merge {
		sql = strings.Replace(sql, projections.PendingUpsert, "", 1)
	}
	if _, err := q.Exec(ctx, sql, c.Args()...); err != nil {
		return fmt.Errorf("write %s: %w", pendingTable, err)
	}
	return nil
}

// sumPending is the live sums of pending_counts per cell, empty cells left
// out.
func sumPending(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (projections.PendingCounts, error) {
	rows, err := q.Query(ctx, `SELECT task_type_id::text, priority, state, assigned, sum(tasks)::bigint FROM pending_counts
		GROUP BY 1, 2, 3, 4 HAVING sum(tasks) <> 0`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", pendingTable, err)
	}
	out := projections.PendingCounts{}
	var k projections.PendingKey
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&k.TaskTypeID, &k.Priority, &k.State, &k.Assigned, &n}, func() error {
		out[k] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read %s: %w", pendingTable, err)
	}
	return out, nil
}

// verifyPending compares the live cells of pending_counts with the folded
// tasks' cells.
func verifyPending(ctx context.Context, tx pgx.Tx, want projections.PendingCounts, rep *Report, max int) error {
	live, err := sumPending(ctx, tx)
	if err != nil {
		return err
	}
	keys := map[projections.PendingKey]bool{}
	for k := range live {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var diffs []Difference
	for k := range keys {
		l, w := live[k], want[k]
		if l == w {
			continue
		}
		ls, ws := fmt.Sprint(l), fmt.Sprint(w)
		diffs = append(diffs, Difference{
			Key:  fmt.Sprintf("task_type_id=%s priority=%s state=%s assigned=%t (sum over its rows)", k.TaskTypeID, k.Priority, k.State, k.Assigned),
			Side: Changed, Columns: []string{"tasks"}, Live: []*string{&ls}, Events: []*string{&ws}})
	}
	slices.SortFunc(diffs, func(a, b Difference) int { return strings.Compare(a.Key, b.Key) })
	rep.Tables[pendingTable] = TableDiff{Rows: int64(len(keys))}
	c := rep.collect(pendingTable, max)
	for _, d := range diffs {
		c.add(d)
	}
	return nil
}
