package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// backlogFromTasks counts worker_tasks' open tasks per backlog cell, the
// type's pause and each task's gate read from the rows themselves: what
// pending_counts must say (ADR 031).
const backlogFromTasks = `SELECT w.task_type_id, tt.name, w.priority,
       CASE WHEN w.status = 'blocked' THEN 'blocked' WHEN w.scheduled THEN 'scheduled'
            WHEN w.gated AND tt.paused THEN 'paused' ELSE 'claimable' END,
       w.assigned_to IS NOT NULL, count(*)
  FROM worker_tasks w JOIN task_types tt ON tt.id = w.task_type_id
 WHERE w.status IN ('pending', 'blocked')
 GROUP BY 1, 2, 3, 4, 5
 ORDER BY CASE w.priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END, 2, 1, 4, 5`

// requireExactBacklog checks every cell of pending_counts against a count
// of worker_tasks' rows after step, and that a paused type's open tasks
// are gated (the counter leaves the gate to the type).
func requireExactBacklog(t *testing.T, db *DB, step string) []BacklogCell {
	t.Helper()
	ctx := context.Background()
	got, err := db.Backlog(ctx, db.pool)
	require.NoError(t, err)
	rows, err := db.pool.Query(ctx, backlogFromTasks)
	require.NoError(t, err)
	var want []BacklogCell
	var c BacklogCell
	for rows.Next() {
		require.NoError(t, rows.Scan(&c.TaskTypeID, &c.TaskType, &c.Priority, &c.State, &c.Assigned, &c.Tasks))
		want = append(want, c)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got, "pending_counts after %s", step)
	var ungated int
	require.NoError(t, db.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks w JOIN task_types tt ON tt.id = w.task_type_id
		WHERE w.status IN ('pending', 'blocked', 'in_progress') AND w.gated IS DISTINCT FROM tt.gated`).Scan(&ungated))
	require.Zero(t, ungated, "open tasks whose gate is not their type's after %s", step)
	return got
}
