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

// ScheduleExecutions pages through a schedule's executions, newest first;
// before is the run number the previous page ended at (0: the start).
func (db *DB) ScheduleExecutions(ctx context.Context, id string, before, limit int) ([]Execution, error) {
	if _, err := db.GetSchedule(ctx, db.pool, id); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	args := []any{id, limit}
	where := ""
	if before > 0 {
		where, args = "AND w.schedule_run < $3", append(args, before)
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

// LastFailure is the most recent execution that ended failed.
type LastFailure struct {
	Run    int       `json:"run"`
	TaskID string    `json:"task_id"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ScheduleStats sums up a schedule's executions.
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
	// Durations of finished executions (first start to last finish).
	AvgDurationSeconds *float64     `json:"avg_duration_seconds"`
	P95DurationSeconds *float64     `json:"p95_duration_seconds"`
	LastFailure        *LastFailure `json:"last_failure"`
}

// GetScheduleStats computes runs, success rate, average and p95 duration
// and the last failure of a schedule.
func (db *DB) GetScheduleStats(ctx context.Context, id string) (*ScheduleStats, error) {
	s, err := db.GetSchedule(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	st := &ScheduleStats{Skipped: s.Skips, FireFailures: s.FireFailures}
	sql := fmt.Sprintf(executionsSQL, "", "") + `, durations AS (
	    SELECT extract(epoch FROM completed_at - started_at)::float8 AS d FROM executions
	     WHERE outcome IN ('completed', 'failed', 'cancelled') AND started_at IS NOT NULL AND completed_at IS NOT NULL)
	SELECT count(*)::int,
	       count(*) FILTER (WHERE outcome = 'completed')::int,
	       count(*) FILTER (WHERE outcome = 'failed')::int,
	       count(*) FILTER (WHERE outcome = 'cancelled')::int,
	       (SELECT avg(d) FROM durations),
	       (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY d) FROM durations),
	       (SELECT jsonb_build_object('run', run, 'task_id', last_task_id, 'reason', coalesce(failure_reason, ''), 'at', completed_at)
	          FROM executions WHERE outcome = 'failed' ORDER BY run DESC LIMIT 1)
	  FROM executions`
	var last []byte
	err = db.pool.QueryRow(ctx, sql, id).Scan(&st.Runs, &st.Completed, &st.Failed, &st.Cancelled,
		&st.AvgDurationSeconds, &st.P95DurationSeconds, &last)
	if err != nil {
		return nil, mapErr(fmt.Errorf("schedule stats: %w", err))
	}
	st.Unfinished = st.Runs - st.Completed - st.Failed - st.Cancelled
	if finished := st.Completed + st.Failed + st.Cancelled; finished > 0 {
		r := float64(st.Completed) / float64(finished)
		st.SuccessRate = &r
	}
	if last != nil {
		st.LastFailure = &LastFailure{}
		if err := json.Unmarshal(last, st.LastFailure); err != nil {
			return nil, fmt.Errorf("schedule stats: last failure: %w", err)
		}
		st.LastFailure.At = st.LastFailure.At.UTC()
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
