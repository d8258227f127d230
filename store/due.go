package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// RunAtActor is the system actor of task.due.
const RunAtActor = "run-at"

// makeDue appends task.due to up to $2 scheduled tasks whose run_at ($1 or
// earlier) has come, in one statement, as the claim does: the tasks are
// picked in time order through worker_tasks_scheduled with SKIP LOCKED (two
// instances' timers never wait for each other), the UPDATE is the fold of
// task.due, and task_counts moves them from scheduled to queued (the
// unassigned ones), pending_counts from their scheduled cells to their
// ready ones. Nothing is written when nothing is due.
const makeDue = `WITH due AS MATERIALIZED (
    SELECT coalesce(array_agg(id), '{}') AS ids FROM (
        SELECT id FROM worker_tasks WHERE status = 'pending' AND scheduled AND available_at <= $1
         ORDER BY available_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) d
), t AS (
    UPDATE worker_tasks w SET scheduled = false, updated_at = $1, version = w.version + 1
     WHERE w.id = ANY((SELECT ids FROM due)::uuid[])
    RETURNING w.id, w.version, w.available_at, w.assigned_to IS NULL AS unassigned, w.task_type_id, w.priority
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', t.id, t.version, 'task.due', jsonb_build_object('run_at', t.available_at), $3::jsonb, $1 FROM t
), cnt AS (
    INSERT INTO task_counts AS c (pid, scheduled, queued)
    SELECT pg_backend_pid(), -count(*), count(*) FILTER (WHERE unassigned) FROM t HAVING count(*) > 0
    ON CONFLICT (pid) DO UPDATE SET scheduled = c.scheduled + excluded.scheduled, queued = c.queued + excluded.queued
), pnd AS (
    INSERT INTO pending_counts AS pc (pid, task_type_id, priority, state, assigned, tasks)
    SELECT pg_backend_pid(), t.task_type_id, t.priority, s.state, NOT t.unassigned, sum(s.n)
      FROM t CROSS JOIN (VALUES ('scheduled', -1), ('ready', 1)) s(state, n)
     GROUP BY 2, 3, 4, 5 ORDER BY 2, 3, 4, 5
    ` + projections.PendingUpsert + `
)
SELECT t.available_at FROM t`

// MakeDue makes up to max scheduled tasks whose run_at has come claimable,
// each with its task.due, and returns their run_at times. Tasks another
// instance is making due right now are skipped, not waited for.
func (db *DB) MakeDue(ctx context.Context, max int) ([]time.Time, error) {
	meta, err := json.Marshal(events.Meta{Actor: events.System(RunAtActor)})
	if err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, makeDue, db.Now(), max, string(meta))
	if err != nil {
		return nil, mapErr(fmt.Errorf("make due: %w", err))
	}
	runAts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, mapErr(fmt.Errorf("make due: %w", err))
	}
	if len(runAts) > 0 {
		db.metrics.appended.WithLabelValues("task.due").Add(float64(len(runAts)))
		db.afterCommit()
	}
	return runAts, nil
}

// NextWakeAt is when the due timer must look next (nil: no time is known):
// the earliest run_at of a task still waiting for it (one probe of
// worker_tasks_scheduled), or the earliest end of a full rate window of a
// limited type with tasks waiting for it, whichever comes first. A window
// is full until its rate_limit.count-th latest claim is a window old: one
// backward walk of task_events_gated_claims per rate-limited type, at most
// count entries, within the longest window (a claim older than it frees no
// room later; a log partitioned by time plans the last day's partitions);
// with no rate-limited type, one probe of task_types_limited.
func (db *DB) NextWakeAt(ctx context.Context) (*time.Time, error) {
	var at *time.Time
	err := db.pool.QueryRow(ctx, `SELECT least(
    (SELECT available_at FROM worker_tasks WHERE status = 'pending' AND scheduled ORDER BY available_at, id LIMIT 1),
    (SELECT min(s.at) FROM task_types tt
      CROSS JOIN LATERAL (SELECT e.occurred_at + make_interval(secs => tt.rate_limit_seconds) AS at FROM task_events e
          WHERE e.type = 'task.claimed' AND e.data ? 'task_type_id' AND e.data->>'task_type_id' = tt.id::text
            AND e.occurred_at > $2
          ORDER BY e.occurred_at DESC OFFSET tt.rate_limit_count - 1 LIMIT 1) s
      WHERE tt.gated AND NOT tt.paused AND tt.rate_limit_count IS NOT NULL AND s.at > $1
        AND coalesce((SELECT true FROM worker_tasks w WHERE w.task_type_id = tt.id AND `+gatedPool+` LIMIT 1),
                     (SELECT true FROM worker_tasks w WHERE w.task_type_id = tt.id AND `+gatedMine+` LIMIT 1), false)))`,
		db.Now(), db.Now().Add(-events.MaxRateWindow)).Scan(&at)
	if err != nil {
		return nil, mapErr(fmt.Errorf("next wake: %w", err))
	}
	if at != nil {
		utc := at.UTC()
		at = &utc
	}
	return at, nil
}
