package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Execution is one firing's whole retry chain: its original task and the
// retries after it, folded into one outcome.
type Execution struct {
	Run        int    `json:"run"`
	TaskID     string `json:"task_id"`
	LastTaskID string `json:"last_task_id"`
	// Outcome: pending, running, retrying (a failure whose retry is being
	// decided), completed, failed (retries exhausted or skipped), cancelled.
	Outcome         string     `json:"outcome"`
	Attempts        int        `json:"attempts"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at"`
	FinishedAt      *time.Time `json:"finished_at"`
	DurationSeconds *float64   `json:"duration_seconds"`
	FailureReason   *string    `json:"failure_reason,omitempty"`
}

// executionsSQL folds a schedule's tasks into executions ($1: schedule id),
// newest first; the latest attempt of each chain gives its outcome.
const executionsSQL = `WITH chains AS (
    SELECT w.schedule_run AS run, count(*) AS attempts,
           (array_agg(w.id::text ORDER BY w.retry_count))[1] AS task_id,
           (array_agg(w.id::text ORDER BY w.retry_count DESC))[1] AS last_task_id,
           min(w.created_at) AS created_at,
           (array_agg(w.started_at ORDER BY w.retry_count))[1] AS started_at,
           (array_agg(w.status ORDER BY w.retry_count DESC))[1] AS status,
           (array_agg(w.retry_outcome ORDER BY w.retry_count DESC))[1] AS retry_outcome,
           (array_agg(w.completed_at ORDER BY w.retry_count DESC))[1] AS completed_at,
           (array_agg(w.failure_reason ORDER BY w.retry_count DESC))[1] AS failure_reason
      FROM worker_tasks w
     WHERE w.schedule_id = $1 AND w.schedule_run IS NOT NULL %s
     GROUP BY w.schedule_run
     ORDER BY w.schedule_run DESC %s
), executions AS (
    SELECT c.*, CASE c.status
               WHEN 'completed' THEN 'completed'
               WHEN 'cancelled' THEN 'cancelled'
               WHEN 'in_progress' THEN 'running'
               WHEN 'pending' THEN 'pending'
               ELSE CASE WHEN c.retry_outcome IN ('skipped', 'exhausted') THEN 'failed' ELSE 'retrying' END
           END AS outcome
      FROM chains c
)`

const executionColumns = `run, task_id, last_task_id, outcome, attempts, created_at, started_at,
    CASE WHEN outcome IN ('completed', 'failed', 'cancelled') THEN completed_at END,
    CASE WHEN outcome = 'failed' THEN failure_reason END`

func scanExecution(row pgx.Row) (Execution, error) {
	var e Execution
	err := row.Scan(&e.Run, &e.TaskID, &e.LastTaskID, &e.Outcome, &e.Attempts, &e.CreatedAt, &e.StartedAt,
		&e.FinishedAt, &e.FailureReason)
	if err != nil {
		return e, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	for _, p := range []**time.Time{&e.StartedAt, &e.FinishedAt} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
	if e.StartedAt != nil && e.FinishedAt != nil {
		d := e.FinishedAt.Sub(*e.StartedAt).Seconds()
		e.DurationSeconds = &d
	}
	return e, nil
}

// ScheduleExecutions pages through a schedule's kept executions (see
// PruneScheduleHistory), newest first; before is the run number the
// previous page ended at (0: the start).
func (db *DB) ScheduleExecutions(ctx context.Context, id string, before, limit int) ([]Execution, error) {
	if _, err := db.GetSchedule(ctx, db.pool, id); err != nil {
		return nil, err
	}
	from, err := db.historyFromRun(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	args := []any{id, limit, from}
	where := "AND w.schedule_run >= $3"
	if before > 0 {
		where, args = where+" AND w.schedule_run < $4", append(args, before)
	}
	sql := fmt.Sprintf(executionsSQL, where, "LIMIT $2") + ` SELECT ` + executionColumns + ` FROM executions ORDER BY run DESC`
	rows, err := db.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("schedule executions: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Execution, error) { return scanExecution(r) })
	if err != nil {
		return nil, mapErr(fmt.Errorf("schedule executions: %w", err))
	}
	if out == nil {
		out = []Execution{}
	}
	return out, nil
}

// historyFromRun is the first run of schedule id's kept history (0 before
// any pruning).
func (db *DB) historyFromRun(ctx context.Context, q Querier, id string) (int, error) {
	var from int
	err := q.QueryRow(ctx, `SELECT coalesce((SELECT from_run FROM schedule_history WHERE schedule_id = $1), 0)`, id).Scan(&from)
	if err != nil {
		return 0, mapErr(fmt.Errorf("schedule history: %w", err))
	}
	return from, nil
}

// LastFailure is the most recent execution that ended failed.
type LastFailure struct {
	Run    int       `json:"run"`
	TaskID string    `json:"task_id"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ScheduleStats sums up a schedule's executions. Every figure but the p95
// comes from counters kept as executions end (schedule_counts), so pruning
// the history changes none of them.
type ScheduleStats struct {
	Runs         int `json:"runs"`
	Completed    int `json:"completed"`
	Failed       int `json:"failed"`
	Cancelled    int `json:"cancelled"`
	Unfinished   int `json:"unfinished"`
	Skipped      int `json:"skipped"`
	FireFailures int `json:"fire_failures"`
	// SuccessRate is completed / finished executions; nil before any ended.
	SuccessRate *float64 `json:"success_rate"`
	// Durations of finished executions (first start to last finish): the
	// average over all of them, the p95 over the kept history.
	AvgDurationSeconds *float64     `json:"avg_duration_seconds"`
	P95DurationSeconds *float64     `json:"p95_duration_seconds"`
	LastFailure        *LastFailure `json:"last_failure"`
}

// scheduleCountsSQL sums a schedule's counter rows (one per server process
// that ended one of its executions).
var scheduleCountsSQL = `SELECT coalesce(sum(completed), 0)::int, coalesce(sum(failed), 0)::int,
	       coalesce(sum(cancelled), 0)::int, coalesce(sum(timed), 0)::bigint, coalesce(sum(seconds), 0)::float8,
	       (array_agg(jsonb_build_object('run', last_failure_run, 'task_id', last_failure_task_id,
	                  'reason', coalesce(last_failure_reason, ''), 'at', last_failure_at) ORDER BY last_failure_run DESC)
	          FILTER (WHERE last_failure_run IS NOT NULL))[1]
	  FROM schedule_counts WHERE schedule_id = $1`

// GetScheduleStats reads runs, success rate, average duration and the last
// failure of a schedule from its counters (a few rows, whatever its
// history), and the p95 duration from its kept executions.
func (db *DB) GetScheduleStats(ctx context.Context, id string) (*ScheduleStats, error) {
	s, err := db.GetSchedule(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	from, err := db.historyFromRun(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	st := &ScheduleStats{Runs: s.Runs, Skipped: s.Skips, FireFailures: s.FireFailures}
	var timed int64
	var seconds float64
	var last []byte
	err = db.pool.QueryRow(ctx, scheduleCountsSQL, id).
		Scan(&st.Completed, &st.Failed, &st.Cancelled, &timed, &seconds, &last)
	if err != nil {
		return nil, mapErr(fmt.Errorf("schedule stats: %w", err))
	}
	st.Unfinished = max(st.Runs-st.Completed-st.Failed-st.Cancelled, 0)
	if finished := st.Completed + st.Failed + st.Cancelled; finished > 0 {
		r := float64(st.Completed) / float64(finished)
		st.SuccessRate = &r
	}
	if timed > 0 {
		avg := seconds / float64(timed)
		st.AvgDurationSeconds = &avg
	}
	if last != nil {
		st.LastFailure = &LastFailure{}
		if err := json.Unmarshal(last, st.LastFailure); err != nil {
			return nil, fmt.Errorf("schedule stats: last failure: %w", err)
		}
		st.LastFailure.At = st.LastFailure.At.UTC()
	}
	sql := fmt.Sprintf(executionsSQL, "AND w.schedule_run >= $2", "") + `
	SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)::float8)
	  FROM executions WHERE outcome IN ('completed', 'failed', 'cancelled') AND started_at IS NOT NULL AND completed_at IS NOT NULL`
	if err := db.pool.QueryRow(ctx, sql, id, from).Scan(&st.P95DurationSeconds); err != nil {
		return nil, mapErr(fmt.Errorf("schedule stats: p95: %w", err))
	}
	return st, nil
}

// RecentFailedStreak is how many of a schedule's latest finished
// executions numbered after afterRun ended failed in a row, looking at n
// at most, with those executions (newest first) as evidence.
func (db *DB) RecentFailedStreak(ctx context.Context, q Querier, id string, afterRun, n int) (int, []Execution, error) {
	sql := fmt.Sprintf(executionsSQL, "AND w.schedule_run > $2", "") + ` SELECT ` + executionColumns + `
	  FROM executions WHERE outcome IN ('completed', 'failed', 'cancelled') ORDER BY run DESC LIMIT $3`
	rows, err := q.Query(ctx, sql, id, afterRun, n)
	if err != nil {
		return 0, nil, mapErr(fmt.Errorf("failed streak: %w", err))
	}
	exs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Execution, error) { return scanExecution(r) })
	if err != nil {
		return 0, nil, mapErr(fmt.Errorf("failed streak: %w", err))
	}
	streak := 0
	for _, e := range exs {
		if e.Outcome != "failed" {
			break
		}
		streak++
	}
	return streak, exs[:streak], nil
}

// ScheduleMetrics is the scheduler's dashboard.
type ScheduleMetrics struct {
	Active      int `json:"active"`
	Paused      int `json:"paused"`
	DueNextHour int `json:"due_next_hour"`
	// In the last 24 hours: regular firings, manual runs, skips, failed firings.
	Fired24h   int `json:"fired_24h"`
	Runs24h    int `json:"manual_runs_24h"`
	Skipped24h int `json:"skipped_24h"`
	Failed24h  int `json:"failed_24h"`
	// Firing delay (due time to the firing's task.created) over the last 24
	// hours' regular firings, in seconds; nil without firings.
	DelayP50Seconds *float64 `json:"delay_p50_seconds"`
	DelayP99Seconds *float64 `json:"delay_p99_seconds"`
}

// GetScheduleMetrics computes the scheduler's dashboard at the store's now.
func (db *DB) GetScheduleMetrics(ctx context.Context) (*ScheduleMetrics, error) {
	now := db.Now()
	m := &ScheduleMetrics{}
	b := &pgx.Batch{}
	b.Queue(`SELECT count(*) FILTER (WHERE state = 'active')::int, count(*) FILTER (WHERE state = 'paused')::int,
	        count(*) FILTER (WHERE state = 'active' AND next_due_at < $1)::int FROM schedules`, now.Add(time.Hour)).
		QueryRow(func(r pgx.Row) error { return r.Scan(&m.Active, &m.Paused, &m.DueNextHour) })
	b.Queue(`SELECT count(*) FILTER (WHERE kind = 'fired')::int, count(*) FILTER (WHERE kind = 'run')::int,
	        count(*) FILTER (WHERE kind = 'skipped')::int, count(*) FILTER (WHERE kind = 'failed')::int,
	        percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM at - due_at)) FILTER (WHERE kind = 'fired'),
	        percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM at - due_at)) FILTER (WHERE kind = 'fired')
	   FROM schedule_firings WHERE at > $1`, now.Add(-24*time.Hour)).
		QueryRow(func(r pgx.Row) error {
			return r.Scan(&m.Fired24h, &m.Runs24h, &m.Skipped24h, &m.Failed24h, &m.DelayP50Seconds, &m.DelayP99Seconds)
		})
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, mapErr(fmt.Errorf("schedule metrics: %w", err))
	}
	return m, nil
}
