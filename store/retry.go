package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

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
// Both writes must commit together: pass a transaction. The unique index on
// parent_task_id makes a second retry of the same task fail with a conflict.
func (db *DB) CreateRetry(ctx context.Context, q Querier, id string, p RetryParams) (*events.Task, error) {
	failed, err := db.GetTask(ctx, q, id)
	if err != nil {
		return nil, err
	}
	tt, err := db.GetTaskType(ctx, q, failed.TaskTypeID)
	if err != nil {
		return nil, err
	}
	n := failed.RetryCount + 1
	decision := events.TaskRetried{RetryNumber: n, MaxRetries: tt.MaxRetries, Hint: p.Hint, Manual: p.Manual}
	// Decide before writing anything, so a refusal leaves q untouched.
	if _, err := failed.Retried(decision); err != nil {
		return nil, err
	}
	if p.Meta.CorrelationID == "" {
		if p.Meta.CorrelationID, err = db.RootTaskID(ctx, q, id); err != nil {
			return nil, err
		}
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
	// The backoff counts from the failure, so a reactor that lags behind
	// (or an admin retrying by hand later) does not add to it.
	if backoff := events.RetryBackoff(tt.RetryBackoffSeconds, n); backoff > 0 {
		at := db.Now()
		if failed.CompletedAt != nil {
			at = *failed.CompletedAt
		}
		if at = at.Add(backoff); at.After(db.Now()) {
			np.AvailableAt = &at
		}
	}
	retry, err := db.CreateTask(ctx, q, NewTaskParams{NewTaskParams: np, TaskTypeID: tt.ID}, p.Meta)
	if err != nil {
		return nil, fmt.Errorf("create retry of %s: %w", id, err)
	}
	decision.RetryTaskID = retry.ID
	updateID, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	_, _, err = db.UpdateTask(ctx, q, id, p.Meta, func(t *events.Task) ([]events.Payload, error) {
		ps, err := t.Retried(decision)
		if err != nil {
			return nil, err
		}
		upd, err := t.PostUpdate(updateID.String(), "", fmt.Sprintf("Retry #%d created: %s", n, retry.ID), false)
		return append(ps, upd...), err
	})
	if err != nil {
		return nil, fmt.Errorf("record retry of %s: %w", id, err)
	}
	return retry, nil
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
