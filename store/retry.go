package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// RetryParams says how to retry a failed task.
type RetryParams struct {
	// Hint is advice for the next attempt (from the retry intelligence);
	// "" uses the template alone.
	Hint string
	// Manual marks a retry an admin ordered; it is allowed after the
	// automatic decision skipped or exhausted the retries.
	Manual bool
	// Meta of the events; CorrelationID defaults to the retry chain's root.
	Meta events.Meta
}

// CreateRetry creates the retry of the failed task id (same type, params and
// priority; title "(retry N)"; parent_task_id; retry_count N; unassigned; the
// failure in its description; available after the type's backoff) and records
// it on the failed task: task.retried and the update "Retry #N created: <id>".
// The unique index on parent_task_id makes a second retry of the same task
// fail with a conflict. A retry keeps its task's unique key: when another
// task holds the key meanwhile, no retry is made and the error is an
// *events.DuplicateTaskError.
func (db *DB) CreateRetry(ctx context.Context, q Querier, id string, p RetryParams) (*events.Task, error) {
	failed, err := db.GetTask(ctx, q, id)
	if err != nil {
		return nil, err
	}
	tt, err := db.GetTaskType(ctx, q, failed.TaskTypeID)
	if err != nil {
		return nil, err
	}
	return db.CreateRetryOf(ctx, q, failed, tt, p)
}

// CreateRetryOf is CreateRetry for a failed task and its type already read
// through q. Both streams' events and projections go out as one batch, one
// round trip: the retry task and the failed task's record of it commit
// together, and a concurrent write to the failed task (its version moved)
// makes the whole batch fail with a conflict.
func (db *DB) CreateRetryOf(ctx context.Context, q Querier, failed *events.Task, tt *events.TaskType, p RetryParams) (*events.Task, error) {
	n := failed.RetryCount + 1
	decision := events.TaskRetried{RetryNumber: n, MaxRetries: tt.MaxRetries, Hint: p.Hint, Manual: p.Manual}
	if _, err := failed.Retried(decision); err != nil {
		return nil, err
	}
	meta := p.Meta
	if meta.CorrelationID == "" {
		root, err := db.RootOf(ctx, q, failed)
		if err != nil {
			return nil, err
		}
		meta.CorrelationID = root
	}
	reason := ""
	if failed.FailureReason != nil {
		reason = *failed.FailureReason
	}
	np := events.NewTaskParams{
		Title: events.RetryTitle(failed.Title, n),
		Description: events.RetryDescription(failed.Description, events.RetryText{
			Reason: reason, N: n, MaxRetries: tt.MaxRetries, Hint: p.Hint, Manual: p.Manual,
		}),
		Params: failed.Params, Priority: failed.Priority, RetryCount: n, ParentTaskID: failed.ID,
	}
	// A retry keeps its task's dependencies (done, or released by an
	// admin), so its worker gets the same inputs.
	np.DependsOn = failed.DependsOn
	if failed.OnDependencyFailure != nil {
		np.OnDependencyFailure = *failed.OnDependencyFailure
	}
	if failed.WorkflowID != nil { // a retry takes its task's place in the workflow
		np.WorkflowID = *failed.WorkflowID
	}
	if failed.Ref != nil {
		np.Ref = *failed.Ref
	}
	if failed.ScheduleID != nil && failed.ScheduleRun != nil { // a retry belongs to its firing's execution
		np.ScheduleID, np.ScheduleRun = *failed.ScheduleID, *failed.ScheduleRun
	}
	if failed.UniqueKey != nil {
		// The retry keeps the key, so it waits for no window (the failed
		// task never completed), but no other task may hold the key now.
		np.UniqueKey = *failed.UniqueKey
		if err := db.checkKeyFree(ctx, q, failed.TaskTypeID, np.UniqueKey); err != nil {
			return nil, err
		}
	}
	now := db.Now()
	// The backoff counts from the failure, so a reactor that lags behind
	// (or an admin retrying by hand later) does not add to it.
	if backoff := events.RetryBackoff(tt.RetryBackoffSeconds, n); backoff > 0 {
		at := now
		if failed.CompletedAt != nil {
			at = *failed.CompletedAt
		}
		if at = at.Add(backoff); at.After(now) {
			np.AvailableAt = &at
		}
	}
	created, err := events.NewTask(np, tt)
	if err != nil {
		return nil, fmt.Errorf("create retry of %s: %w", failed.ID, err)
	}
	retryID, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	updateID, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	decision.RetryTaskID = retryID.String()
	recorded, err := failed.Retried(decision)
	if err != nil {
		return nil, err
	}
	update, err := failed.PostUpdate(updateID.String(), "", fmt.Sprintf("Retry #%d created: %s", n, retryID), false)
	if err != nil {
		return nil, err
	}

	retryEvs, err := stamp(events.StreamTask, retryID.String(), 0, created, meta, now)
	if err != nil {
		return nil, err
	}
	failedEvs, err := stamp(events.StreamTask, failed.ID, failed.Version, append(recorded, update...), meta, now)
	if err != nil {
		return nil, err
	}
	retry, after := &events.Task{}, *failed
	for _, e := range retryEvs {
		retry.Apply(e)
	}
	for _, e := range failedEvs {
		after.Apply(e)
	}
	// Rows before events, the order every writer locks in (see appendStream).
	b := &pgx.Batch{}
	db.projector.Task(b, nil, retry, retryEvs)
	db.projector.Task(b, failed, &after, failedEvs)
	if err := queueEvents(b, append(retryEvs, failedEvs...)); err != nil {
		return nil, err
	}
	if err := db.send(ctx, q, b, append(retryEvs, failedEvs...), nil); err != nil {
		return nil, fmt.Errorf("create retry of %s: %w", failed.ID, err)
	}
	return retry, nil
}

// checkKeyFree locks a unique key (in q's transaction) and says, with an
// *events.DuplicateTaskError, which task holds it, if one does.
func (db *DB) checkKeyFree(ctx context.Context, q Querier, typeID, key string) error {
	tx, inTx := q.(pgx.Tx)
	if !inTx {
		return errors.New("retry of a task with a unique key: needs a transaction")
	}
	holder, err := db.UniqueKeyHolder(ctx, tx, typeID, key)
	if err != nil {
		return err
	}
	if holder != "" {
		return &events.DuplicateTaskError{UniqueKey: key, TaskID: holder}
	}
	return nil
}

// RootOf is the first task of t's retry chain: the correlation id of
// everything the chain causes. No query for a task that is no retry.
func (db *DB) RootOf(ctx context.Context, q Querier, t *events.Task) (string, error) {
	if t.ParentTaskID == nil {
		return t.ID, nil
	}
	return db.RootTaskID(ctx, q, t.ID)
}

// RootTaskID is the first task of id's retry chain (id itself when it is no
// retry): the correlation id of everything the chain causes.
func (db *DB) RootTaskID(ctx context.Context, q Querier, id string) (string, error) {
	var root string
	err := q.QueryRow(ctx, `WITH RECURSIVE chain AS (
		    SELECT id, parent_task_id, 0 AS depth FROM worker_tasks WHERE id = $1
		    UNION ALL
		    SELECT w.id, w.parent_task_id, c.depth + 1 FROM worker_tasks w JOIN chain c ON w.id = c.parent_task_id
		     WHERE c.depth < 1000)
		SELECT id FROM chain ORDER BY depth DESC LIMIT 1`, id).Scan(&root)
	if err != nil {
		return "", mapErr(fmt.Errorf("root of %s: %w", id, err))
	}
	return root, nil
}
