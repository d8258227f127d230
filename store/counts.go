package store

import (
	"context"
	"fmt"
)

// TaskCounts are the totals kept in task_counts by the transactions that
// change worker_tasks (migration 005, ADR 010): reading them costs the same
// at any size of history.
type TaskCounts struct {
	Pending          int `json:"pending"`
	Queued           int `json:"queued"`    // pending, unassigned and claimable now by time: the queue depth
	Scheduled        int `json:"scheduled"` // pending and waiting for their run_at
	InProgress       int `json:"in_progress"`
	Completed        int `json:"completed"`
	Failed           int `json:"failed"`
	Cancelled        int `json:"cancelled"`
	AwaitingRetry    int `json:"awaiting_retry"`
	RetriesExhausted int `json:"retries_exhausted"`
	RetriesSkipped   int `json:"retries_skipped"`
	Blocked          int `json:"blocked"` // waiting for their dependencies
}

// compactCountsAbove is how many counter rows (one per server process that
// ever changed a task) a read tolerates before it folds the rows of ended
// processes into one.
const compactCountsAbove = 64

// Counts reads the task totals.
func (db *DB) Counts(ctx context.Context, q Querier) (TaskCounts, error) {
	var c TaskCounts
	var rows int
	err := q.QueryRow(ctx, `SELECT coalesce(sum(pending), 0), coalesce(sum(queued), 0), coalesce(sum(in_progress), 0),
		coalesce(sum(completed), 0), coalesce(sum(failed), 0), coalesce(sum(cancelled), 0),
		coalesce(sum(awaiting_retry), 0), coalesce(sum(retries_exhausted), 0), coalesce(sum(retries_skipped), 0),
		coalesce(sum(scheduled), 0), coalesce(sum(blocked), 0), count(*)
		FROM task_counts`).Scan(&c.Pending, &c.Queued, &c.InProgress, &c.Completed, &c.Failed, &c.Cancelled,
		&c.AwaitingRetry, &c.RetriesExhausted, &c.RetriesSkipped, &c.Scheduled, &c.Blocked, &rows)
	if err != nil {
		return c, mapErr(fmt.Errorf("task counts: %w", err))
	}
	if rows > compactCountsAbove {
		if err := db.CompactTaskCounts(ctx); err != nil {
			return c, err
		}
	}
	return c, nil
}

// compactTaskCounts folds the rows of ended processes into pid 0. It names
// every counter column: TestFoldsNameEveryCounterColumn keeps it so.
const compactTaskCounts = `WITH gone AS (
		DELETE FROM task_counts WHERE pid <> 0 AND pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
		RETURNING *
	)
	INSERT INTO task_counts AS c (pid, pending, queued, in_progress, completed, failed, cancelled, awaiting_retry,
	    retries_exhausted, retries_skipped, scheduled, blocked)
	SELECT 0, coalesce(sum(pending), 0), coalesce(sum(queued), 0), coalesce(sum(in_progress), 0), coalesce(sum(completed), 0),
	       coalesce(sum(failed), 0), coalesce(sum(cancelled), 0), coalesce(sum(awaiting_retry), 0),
	       coalesce(sum(retries_exhausted), 0), coalesce(sum(retries_skipped), 0), coalesce(sum(scheduled), 0), coalesce(sum(blocked), 0) FROM gone
	ON CONFLICT (pid) DO UPDATE SET pending = c.pending + excluded.pending, queued = c.queued + excluded.queued,
	    in_progress = c.in_progress + excluded.in_progress, completed = c.completed + excluded.completed,
	    failed = c.failed + excluded.failed, cancelled = c.cancelled + excluded.cancelled,
	    awaiting_retry = c.awaiting_retry + excluded.awaiting_retry,
	    retries_exhausted = c.retries_exhausted + excluded.retries_exhausted,
	    retries_skipped = c.retries_skipped + excluded.retries_skipped, scheduled = c.scheduled + excluded.scheduled,
	    blocked = c.blocked + excluded.blocked`

// CompactTaskCounts folds the counter rows of server processes that have
// ended into the row of pid 0. Their transactions are over, so their rows
// no longer change; the totals stay the same.
func (db *DB) CompactTaskCounts(ctx context.Context) error {
	_, err := db.pool.Exec(ctx, compactTaskCounts)
	return mapErr(err)
}
