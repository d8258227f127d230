package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// Backlog states: what a waiting task waits for. A paused type's ready
// tasks are paused; a limited type's are claimable (the limits ration
// them at the claim).
const (
	BacklogClaimable = "claimable"
	BacklogPaused    = "paused"
	BacklogScheduled = projections.PendingScheduled
	BacklogBlocked   = projections.PendingBlocked
)

// BacklogCell is how many open tasks wait in one state, for one type,
// priority and assignment: pending_counts' sums (migration 040, ADR 031).
type BacklogCell struct {
	TaskTypeID string
	TaskType   string
	Priority   events.Priority
	State      string
	Assigned   bool
	Tasks      int
}

// compactPendingAbove is how many server processes' rows of pending_counts
// a read tolerates before it folds those of ended processes into pid 0.
const compactPendingAbove = 64

// backlogState is the backlog state of a pending_counts row p of type tt:
// its own, or for a ready task its type's pause applied.
const backlogState = `CASE WHEN p.state <> 'ready' THEN p.state WHEN tt.paused THEN 'paused' ELSE 'claimable' END`

// readBacklog sums pending_counts per cell, the type's pause applied, in
// priority and type name order; the last column counts the processes with
// rows. The cost is the counter's rows (processes times cells in use),
// never the backlog.
const readBacklog = `SELECT p.task_type_id, tt.name, p.priority, ` + backlogState + `,
       p.assigned, p.tasks, (SELECT count(DISTINCT pid) FROM pending_counts)
  FROM (SELECT task_type_id, priority, state, assigned, sum(tasks)::bigint AS tasks FROM pending_counts
         GROUP BY 1, 2, 3, 4 HAVING sum(tasks) <> 0) p
  JOIN task_types tt ON tt.id = p.task_type_id
 ORDER BY CASE p.priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END, tt.name, tt.id, 4, 5`

// Backlog reads the open backlog's cells (nonzero ones only).
func (db *DB) Backlog(ctx context.Context, q Querier) ([]BacklogCell, error) {
	rows, err := q.Query(ctx, readBacklog)
	if err != nil {
		return nil, mapErr(fmt.Errorf("backlog: %w", err))
	}
	var out []BacklogCell
	pids, err := scanBacklog(rows, func(c BacklogCell) { out = append(out, c) })
	if err != nil {
		return nil, mapErr(fmt.Errorf("backlog: %w", err))
	}
	return out, db.compactPendingIfMany(ctx, pids)
}

// scanBacklog calls each with every cell of readBacklog's rows, and returns
// how many server processes have rows in pending_counts.
func scanBacklog(rows pgx.Rows, each func(BacklogCell)) (pids int, err error) {
	var c BacklogCell
	_, err = pgx.ForEachRow(rows, []any{&c.TaskTypeID, &c.TaskType, &c.Priority, &c.State, &c.Assigned, &c.Tasks, &pids},
		func() error { each(c); return nil })
	return pids, err
}

// compactPendingIfMany compacts pending_counts when a read saw more than
// compactPendingAbove server processes with rows there.
func (db *DB) compactPendingIfMany(ctx context.Context, pids int) error {
	if pids <= compactPendingAbove {
		return nil
	}
	return db.CompactPendingCounts(ctx)
}

// compactPendingCounts folds the rows of ended processes into pid 0. It
// names every column of pending_counts: TestFoldsNameEveryCounterColumn
// keeps it so.
const compactPendingCounts = `WITH gone AS (
		DELETE FROM pending_counts WHERE pid <> 0 AND pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
		RETURNING *
	)
	INSERT INTO pending_counts AS pc (pid, task_type_id, priority, state, assigned, tasks)
	SELECT 0, task_type_id, priority, state, assigned, sum(tasks) FROM gone GROUP BY 2, 3, 4, 5 ORDER BY 2, 3, 4, 5
	` + projections.PendingUpsert

// CompactPendingCounts folds the rows of pending_counts of server
// processes that have ended into pid 0, then drops pid 0's empty cells
// (a type's drained backlog): the sums stay the same.
func (db *DB) CompactPendingCounts(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(compactPendingCounts)
	b.Queue(`DELETE FROM pending_counts WHERE pid = 0 AND tasks = 0`)
	return mapErr(db.pool.SendBatch(ctx, b).Close())
}
