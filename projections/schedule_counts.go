package projections

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Execution outcomes that schedule_counts counts: an execution (a firing's
// retry chain) counts once its last task ended.
const (
	ExecutionCompleted = "completed"
	ExecutionFailed    = "failed"
	ExecutionCancelled = "cancelled"
)

// ExecutionOutcome is what t adds to its schedule's counters: the outcome
// of its execution when t is the chain's last task (no retry after it) and
// ended; "" otherwise (not a schedule's task, still open, or retried).
func ExecutionOutcome(t *events.Task) string {
	if t == nil || t.ScheduleID == nil || t.ScheduleRun == nil || t.RetryTaskID != nil {
		return ""
	}
	switch t.Status {
	case events.StatusCompleted:
		return ExecutionCompleted
	case events.StatusCancelled:
		return ExecutionCancelled
	case events.StatusFailed:
		if o := t.RetryOutcome; o != nil && (*o == events.RetryOutcomeExhausted || *o == events.RetryOutcomeSkipped) {
			return ExecutionFailed
		}
	}
	return ""
}

// AddScheduleCounts is the ON CONFLICT clause that adds a row of
// schedule_counts (alias c) to the one of the same schedule and process;
// the last failure is the one with the higher run.
const AddScheduleCounts = ` ON CONFLICT (schedule_id, pid) DO UPDATE SET
    completed = c.completed + excluded.completed, failed = c.failed + excluded.failed,
    cancelled = c.cancelled + excluded.cancelled, timed = c.timed + excluded.timed,
    seconds = c.seconds + excluded.seconds,
    last_failure_run = CASE WHEN excluded.last_failure_run >= coalesce(c.last_failure_run, 0) THEN excluded.last_failure_run ELSE c.last_failure_run END,
    last_failure_task_id = CASE WHEN excluded.last_failure_run >= coalesce(c.last_failure_run, 0) THEN excluded.last_failure_task_id ELSE c.last_failure_task_id END,
    last_failure_reason = CASE WHEN excluded.last_failure_run >= coalesce(c.last_failure_run, 0) THEN excluded.last_failure_reason ELSE c.last_failure_reason END,
    last_failure_at = CASE WHEN excluded.last_failure_run >= coalesce(c.last_failure_run, 0) THEN excluded.last_failure_at ELSE c.last_failure_at END`

// ExecutionStart is the start of the execution of the task aliased t: the
// first attempt's, read from the chain's original task (one probe of the
// unique index of originals).
const ExecutionStart = `(SELECT o.started_at FROM worker_tasks o
    WHERE o.schedule_id = t.schedule_id AND o.schedule_run = t.schedule_run AND o.parent_task_id IS NULL)`

// addExecution adds (sign 1) or takes back (-1) one execution's outcome
// and duration to this process's row of its schedule's counters. $1 the
// schedule, $2 the run, $3..$5 the outcome, $6 the sign, $7 the end, $8..$10
// the failure (NULL unless one is added).
var addExecution = `INSERT INTO schedule_counts AS c (schedule_id, pid, completed, failed, cancelled, timed, seconds,
        last_failure_run, last_failure_task_id, last_failure_reason, last_failure_at)
SELECT t.schedule_id, pg_backend_pid(), $3::bigint, $4::bigint, $5::bigint,
       CASE WHEN d.s IS NULL THEN 0 ELSE $6::bigint END, coalesce(d.s * $6::bigint, 0),
       $8::int, $9::uuid, $10::text, CASE WHEN $8::int IS NOT NULL THEN $7::timestamptz END
  FROM (SELECT $1::uuid AS schedule_id, $2::int AS schedule_run) t,
       LATERAL (SELECT extract(epoch FROM $7::timestamptz - ` + ExecutionStart + `)::float8 AS s) d` + AddScheduleCounts

// queueScheduleCounts queues the change of a schedule's counters when a
// task of it goes from before to after: the outcome it stops counting for,
// then the one it starts counting for; nothing in the common case.
func queueScheduleCounts(b *pgx.Batch, before, after *events.Task) {
	was, is := ExecutionOutcome(before), ExecutionOutcome(after)
	if was == is {
		return
	}
	if was != "" {
		queueExecution(b, before, was, -1)
	}
	if is != "" {
		queueExecution(b, after, is, 1)
	}
}

func queueExecution(b *pgx.Batch, t *events.Task, outcome string, sign int64) {
	var completed, failed, cancelled int64
	var run, reason, taskID any
	switch outcome {
	case ExecutionCompleted:
		completed = sign
	case ExecutionCancelled:
		cancelled = sign
	case ExecutionFailed:
		failed = sign
		if sign > 0 {
			r := ""
			if t.FailureReason != nil {
				r = *t.FailureReason
			}
			run, reason, taskID = *t.ScheduleRun, r, t.ID
		}
	}
	b.Queue(addExecution, *t.ScheduleID, *t.ScheduleRun, completed, failed, cancelled, sign, t.CompletedAt, run, taskID, reason)
}

// RecountScheduleCounts selects the pid 0 rows of schedule_counts recounted
// from the tasks of the worker_tasks table named (qualified), for the
// schedules meeting where (on l.schedule_id): the last task of each chain
// (no retry after it) gives the outcome, as ExecutionOutcome says, the
// chain's original task the start, as ExecutionStart does. Migration 037
// counted the tasks it found the same way; replay rebuilds and verifies
// the counters with it.
func RecountScheduleCounts(tasks, where string) string {
	return fmt.Sprintf(`SELECT schedule_id, 0 AS pid,
       count(*) FILTER (WHERE outcome = 'completed') AS completed,
       count(*) FILTER (WHERE outcome = 'failed') AS failed,
       count(*) FILTER (WHERE outcome = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE started_at IS NOT NULL AND completed_at IS NOT NULL) AS timed,
       coalesce(sum(extract(epoch FROM completed_at - started_at)::float8)
                FILTER (WHERE started_at IS NOT NULL AND completed_at IS NOT NULL), 0) AS seconds,
       (array_agg(run ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1] AS last_failure_run,
       (array_agg(id ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1] AS last_failure_task_id,
       (array_agg(coalesce(failure_reason, '') ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1] AS last_failure_reason,
       (array_agg(completed_at ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1] AS last_failure_at
  FROM (SELECT l.schedule_id, l.schedule_run AS run, l.id, l.failure_reason, l.completed_at, o.started_at,
               CASE WHEN l.status = 'completed' THEN 'completed'
                    WHEN l.status = 'cancelled' THEN 'cancelled'
                    WHEN l.status = 'failed' AND l.retry_outcome IN ('skipped', 'exhausted') THEN 'failed'
               END AS outcome
          FROM %[1]s l
          LEFT JOIN %[1]s o ON o.schedule_id = l.schedule_id AND o.schedule_run = l.schedule_run
                           AND o.parent_task_id IS NULL
         WHERE l.schedule_id IS NOT NULL AND l.schedule_run IS NOT NULL AND l.retry_task_id IS NULL AND (%[2]s)) e
 WHERE outcome IS NOT NULL
 GROUP BY schedule_id`, tasks, where)
}

// ScheduleCountsColumns are the columns RecountScheduleCounts selects, in
// its order.
const ScheduleCountsColumns = `schedule_id, pid, completed, failed, cancelled, timed, seconds,
    last_failure_run, last_failure_task_id, last_failure_reason, last_failure_at`
