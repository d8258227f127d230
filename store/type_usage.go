package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TypeUsage is how much of a task type's limits is in use now.
type TypeUsage struct {
	// InProgress is the type's tasks in progress, what max_in_progress caps.
	InProgress int `json:"in_progress"`
	// ClaimsInWindow is the type's claims in the rate window ending now;
	// nil without a rate limit.
	ClaimsInWindow *int `json:"claims_in_window,omitempty"`
	// NextSlotAt is when a full rate window regains room; nil when it is
	// not full.
	NextSlotAt *time.Time `json:"next_slot_at,omitempty"`
	// KeysInProgress and KeysAtLimit count the concurrency keys with tasks
	// in progress, and those at max_in_progress_per_key.
	KeysInProgress int `json:"keys_in_progress"`
	KeysAtLimit    int `json:"keys_at_limit"`
	// Keys are the busiest keys, most tasks in progress first (at most
	// MaxUsageKeys).
	Keys []KeyUsage `json:"keys"`
}

// KeyUsage is one concurrency key's tasks in progress.
type KeyUsage struct {
	Key        string `json:"key"`
	InProgress int    `json:"in_progress"`
}

// MaxUsageKeys bounds the keys TypeUsage lists.
const MaxUsageKeys = 20

// TypeUsage reads the use of type id's limits now. The counts read the
// type's tasks in progress and, with a rate limit, at most rate_limit.count
// claim events (task_events_gated_claims).
func (db *DB) TypeUsage(ctx context.Context, id string) (*TypeUsage, error) {
	var (
		u    TypeUsage
		keys []byte
	)
	err := db.pool.QueryRow(ctx, `WITH tt AS (
    SELECT id, rate_limit_count, rate_limit_seconds, max_in_progress_per_key FROM task_types WHERE id = $1
), running AS (
    SELECT w.concurrency_key FROM worker_tasks w WHERE w.task_type_id = $1 AND w.status = 'in_progress'
), perkey AS (
    SELECT concurrency_key AS key, count(*)::int AS n FROM running WHERE concurrency_key IS NOT NULL GROUP BY 1
), claims AS (
    SELECT e.occurred_at FROM tt, task_events e
     WHERE tt.rate_limit_count IS NOT NULL AND e.type = 'task.claimed' AND e.data ? 'task_type_id'
       AND e.data->>'task_type_id' = tt.id::text AND e.occurred_at > $2::timestamptz - make_interval(secs => tt.rate_limit_seconds)
       AND e.occurred_at > $4
     ORDER BY e.occurred_at DESC LIMIT (SELECT rate_limit_count FROM tt)
)
SELECT (SELECT count(*) FROM running)::int,
       CASE WHEN tt.rate_limit_count IS NOT NULL THEN (SELECT count(*) FROM claims)::int END,
       CASE WHEN (SELECT count(*) FROM claims) >= tt.rate_limit_count
            THEN (SELECT min(occurred_at) FROM claims) + make_interval(secs => tt.rate_limit_seconds) END,
       (SELECT count(*) FROM perkey)::int,
       (SELECT count(*) FROM perkey WHERE n >= tt.max_in_progress_per_key)::int,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('key', key, 'in_progress', n) ORDER BY n DESC, key), '[]')
          FROM (SELECT key, n FROM perkey ORDER BY n DESC, key LIMIT $3) k)
  FROM tt`, id, db.Now(), MaxUsageKeys, db.Now().Add(-events.MaxRateWindow)).Scan(&u.InProgress, &u.ClaimsInWindow, &u.NextSlotAt, &u.KeysInProgress, &u.KeysAtLimit, &keys)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("task type", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("type usage: %w", err))
	}
	if err := json.Unmarshal(keys, &u.Keys); err != nil {
		return nil, fmt.Errorf("type usage: %w", err)
	}
	if u.NextSlotAt != nil {
		at := u.NextSlotAt.UTC()
		u.NextSlotAt = &at
	}
	return &u, nil
}
