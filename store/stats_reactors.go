package store

import (
	"context"
	"fmt"
)

// ReactorStats is what the reactors add to the admin stats.
type ReactorStats struct {
	// FailedAwaitingRetry: failed tasks the retry reactor has not decided on.
	FailedAwaitingRetry int `json:"failed_awaiting_retry"`
	RetriesExhausted    int `json:"retries_exhausted"`
	RetriesSkipped      int `json:"retries_skipped"`
	// Stuck: tasks in progress whose holder is offline or silent past the
	// offline threshold (the stuck detector fails them after its own
	// threshold).
	Stuck int `json:"stuck"`
	// Outbox counts Telegram messages; nil until the outbox table exists.
	Outbox     *OutboxStats `json:"outbox"`
	ReactorLag []ReactorLag `json:"reactor_lag"`
}

// OutboxStats counts the Telegram outbox by state.
type OutboxStats struct {
	Pending int `json:"pending"`
	Dead    int `json:"dead"`
}

// stuckCount reads the tasks in progress only (worker_tasks_status), which
// worker capacity bounds.
const stuckCount = `SELECT
    (SELECT count(*) FROM worker_tasks t JOIN users u ON u.id = t.assigned_to
      WHERE t.status = 'in_progress'
        AND (NOT u.online OR coalesce(u.last_activity_at, t.started_at) < $1)),
    to_regclass('telegram_outbox') IS NOT NULL`

// reactorStats fills the reactors' part of the admin stats; the retry
// totals come from task_counts (Stats). Stuck reads the tasks in progress
// only, which worker capacity bounds.
func (db *DB) reactorStats(ctx context.Context) (ReactorStats, error) {
	var rs ReactorStats
	var outbox bool
	err := db.pool.QueryRow(ctx, stuckCount, db.Now().Add(-db.offlineAfter)).
		Scan(&rs.Stuck, &outbox)
	if err != nil {
		return rs, mapErr(fmt.Errorf("reactor stats: %w", err))
	}
	if outbox {
		rs.Outbox = &OutboxStats{}
		// Two ranges of telegram_outbox_due: the sent messages, which pile
		// up with history, are never read.
		err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM telegram_outbox WHERE status = 'pending'),
			(SELECT count(*) FROM telegram_outbox WHERE status = 'dead')`).Scan(&rs.Outbox.Pending, &rs.Outbox.Dead)
		if err != nil {
			return rs, mapErr(fmt.Errorf("outbox stats: %w", err))
		}
	}
	rs.ReactorLag, err = db.ReactorLags(ctx)
	return rs, err
}
