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
	// threshold), and pending tasks pre-assigned to a worker silent past it
	// (the stuck detector gives them back to the pool).
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

// stuckCount counts the stuck tasks (stuckInProgress, stuckPending).
var stuckCount = `SELECT (SELECT count(*) FROM (` + stuckInProgress("$1") + `) s)
  + (SELECT count(*) FROM (` + stuckPending("$1") + `) s),
    to_regclass('telegram_outbox') IS NOT NULL`

// reactorStats fills the reactors' part of the admin stats; the retry
// totals come from task_counts (Stats).
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
