package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// completeTasks is the hot path's other half, fused like the claim (ADR 001)
// and batched like it (ADR 008): each task its worker holds in progress is
// marked completed and task.completed appended, in one statement. The guard
// is events.Task.Complete's rule; the SET is the fold of task.completed.
// Row before event, the order every writer locks in; rows in id order (the
// batch is sorted), so two batches never wait on each other in a cycle.
//
// The UPDATE reaches its rows by primary key only, through "id = ANY($1)",
// and joins nothing: each row's worker, event data and meta come from a
// jsonb object keyed by task id ($2, built by jsonMap: a parameter is
// parsed once per statement and read by reference). A join to the
// requests let a generic plan filter one side against the other (a full
// index scan of the table per batch once, 10 million buffers in one bench
// run; and quadratic in the batch's size, which matters since a request of
// the batched lane brings up to 100 completions). The guard is written with
// IS NOT DISTINCT FROM, which no index serves (with plain equalities the
// plan found each id by scanning every in-progress entry of an index of
// statuses). The meaning is the same: status is never NULL, and
// a NULL assignee fails either way.
//
// cnt keeps task_counts (ADR 010): the guard admits tasks in progress only,
// so the batch moves n from in progress to completed; nothing is written
// when nothing was completed. wd counts them in their workers' days
// (projections.WorkerDayCompletions), in worker order so that two batches
// lock those rows in the same order; mn in their minute, in this server
// process's row (projections.TaskMinutes).
var completeTasks = `WITH t AS (
    UPDATE worker_tasks w
       SET status = 'completed', completed_at = $3, updated_at = $3, version = w.version + 1
     WHERE w.id = ANY($1::uuid[])
       AND (w.status, w.assigned_to) IS NOT DISTINCT FROM ('in_progress'::text, ($2::jsonb -> w.id::text ->> 0)::uuid)
    RETURNING w.*
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', t.id, t.version, 'task.completed', $2::jsonb -> t.id::text -> 1, $2::jsonb -> t.id::text -> 2, $3 FROM t
), cnt AS (
    INSERT INTO task_counts AS c (pid, in_progress, completed)
    SELECT pg_backend_pid(), -n, n FROM (SELECT count(*) AS n FROM t) x WHERE n > 0
    ON CONFLICT (pid) DO UPDATE SET in_progress = c.in_progress + excluded.in_progress, completed = c.completed + excluded.completed
), wd AS (
    INSERT INTO worker_day_completions AS u (worker_id, day, completed)
    SELECT t.assigned_to, ($3::timestamptz AT TIME ZONE 'UTC')::date, count(*) FROM t GROUP BY 1 ORDER BY 1
    ON CONFLICT (worker_id, day) DO UPDATE SET completed = u.completed + excluded.completed
), mn AS (
    INSERT INTO task_minutes AS u (minute, pid, completed)
    SELECT date_trunc('minute', $3::timestamptz), pg_backend_pid(), n FROM (SELECT count(*) AS n FROM t) x WHERE n > 0
    ON CONFLICT (minute, pid) DO UPDATE SET completed = u.completed + excluded.completed
), fresh AS (
    ` + freshKeyCompleted + `
), sched AS (
    ` + scheduleCompleted + `
)
SELECT ` + taskColumns + ` FROM t`

// freshKeyCompleted keeps the watched keys (freshness rules) of the
// completed tasks that carry one's unique key, with the projector's
// statement for every other end of a task (replay --verify checks what both
// wrote): a probe of the keys' unique index for those tasks only.
var freshKeyCompleted = projections.KeyTaskEnded("t.unique_key", "t.task_type_id", "$3", "true", "t.id", ", t") +
	" AND t.unique_key LIKE 'fresh:%'"

// scheduleCompleted counts the completed executions of schedules in this
// process's rows of schedule_counts, as the projector does for every other
// end of a task (projections.ExecutionOutcome: a completed task is the last
// of its chain). The original task is read from the statement's snapshot,
// where its start is already what it will stay.
var scheduleCompleted = `INSERT INTO schedule_counts AS c (schedule_id, pid, completed, timed, seconds)
    SELECT t.schedule_id, pg_backend_pid(), count(*), count(d.s), coalesce(sum(d.s), 0)
      FROM t, LATERAL (SELECT extract(epoch FROM t.completed_at - ` + projections.ExecutionStart + `)::float8 AS s) d
     WHERE t.schedule_id IS NOT NULL AND t.schedule_run IS NOT NULL
     GROUP BY t.schedule_id` + projections.AddScheduleCounts

// completeRequest is one completion, its event data and meta marshalled.
type completeRequest struct {
	id, worker, data, meta string
}

// CompleteTask completes the worker's task. Concurrent completions share
// one statement (see batcher); one the fast path does not match (not the
// holder, not in progress, no such task) runs as the general command, which
// returns the precise typed error.
func (db *DB) CompleteTask(ctx context.Context, id, workerID string, meta events.Meta) (*events.Task, []events.Envelope, error) {
	complete := func() (*events.Task, []events.Envelope, error) {
		return db.UpdateTask(ctx, db.pool, id, meta, func(t *events.Task) ([]events.Payload, error) {
			return t.Complete(workerID)
		})
	}
	// Canonical forms: the batch matches rows to requests by id.
	tid, err1 := uuid.Parse(id)
	wid, err2 := uuid.Parse(workerID)
	if err1 != nil || err2 != nil {
		return complete()
	}
	data, err := json.Marshal(events.TaskCompleted{WorkerID: wid.String()})
	if err != nil {
		return nil, nil, err
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, nil, err
	}
	t, err := db.completions.do(ctx, completeRequest{id: tid.String(), worker: wid.String(), data: string(data), meta: string(metaJSON)})
	if err != nil {
		return nil, nil, err
	}
	if t == nil {
		return complete()
	}
	out := completedOutcome(t, data, meta)
	return out.Task, out.Events, nil
}

// completeBatch runs a batch of completions of distinct tasks as one
// implicit transaction; a task it does not complete gets nil.
func (db *DB) completeBatch(ctx context.Context, reqs []completeRequest) ([]outcome[*events.Task], error) {
	n := len(reqs)
	ids := make([]string, n)
	sorted := slices.SortedFunc(slices.Values(reqs), func(a, b completeRequest) int { return strings.Compare(a.id, b.id) })
	m := jsonMap{}
	for i, r := range sorted {
		ids[i] = r.id
		m.add(r.id, `"`+r.worker+`"`, r.data, r.meta)
	}
	b := &pgx.Batch{}
	b.Queue(indexLookupsOnly)
	now := db.Now()
	b.Queue(completeTasks, ids, m.String(), now)
	b.Queue(unblockBatchDependents, ids, now, dependencyMeta)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	done := make(map[string]*events.Task, n)
	for rows.Next() {
		t := &events.Task{}
		if err := rows.Scan(taskDest(t)...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("complete: %w", err)
		}
		normalizeTask(t)
		done[t.ID] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	var unblocked int64
	if err := br.QueryRow().Scan(&unblocked); err != nil {
		return nil, fmt.Errorf("complete: unblock dependents: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	if len(done) > 0 {
		for _, t := range done {
			db.metrics.appended.WithLabelValues("task.completed").Inc()
			at := t.UpdatedAt
			if t.CompletedAt != nil {
				at = *t.CompletedAt
			}
			db.metrics.finished(t, "completed", "none", at)
		}
		db.metrics.appended.WithLabelValues("task.unblocked").Add(float64(unblocked))
		if unblocked > 0 {
			db.afterCommit(completedType, unblockedType)
			db.afterUnblock()
		} else {
			db.afterCommit(completedType)
		}
	}
	outs := make([]outcome[*events.Task], n)
	for i, r := range reqs {
		outs[i].res = done[r.id]
	}
	return outs, nil
}
