package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// completeTask is the hot path's other half, fused like the claim (ADR 001):
// when the worker holds the task in progress, mark it completed and append
// task.completed in one statement. The guard is events.Task.Complete's rule;
// the SET is the fold of task.completed. Row before event, the order every
// writer locks in.
const completeTask = `WITH t AS (
    UPDATE worker_tasks
       SET status = 'completed', completed_at = $3, updated_at = $3, version = version + 1
     WHERE id = $1 AND status = 'in_progress' AND assigned_to = $2
    RETURNING *
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', t.id, t.version, 'task.completed', $4::jsonb, $5::jsonb, $3 FROM t
)
SELECT ` + taskColumns + ` FROM t`

// CompleteTask completes the worker's task in one round trip. When the fast
// path matches nothing (not the holder, not in progress, no such task) it
// falls back to the general command, which returns the precise typed error.
func (db *DB) CompleteTask(ctx context.Context, id, workerID string, meta events.Meta) (*events.Task, []events.Envelope, error) {
	data, err := json.Marshal(events.TaskCompleted{WorkerID: workerID})
	if err != nil {
		return nil, nil, err
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, nil, err
	}
	var t events.Task
	err = db.pool.QueryRow(ctx, completeTask, id, workerID, db.Now(), string(data), string(metaJSON)).Scan(taskDest(&t)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return db.UpdateTask(ctx, db.pool, id, meta, func(t *events.Task) ([]events.Payload, error) {
			return t.Complete(workerID)
		})
	}
	if err != nil {
		return nil, nil, mapErr(fmt.Errorf("complete task: %w", err))
	}
	normalizeTask(&t)
	db.afterCommit()
	e := events.New(events.StreamTask, id, events.TaskCompleted{WorkerID: workerID}, meta, *t.CompletedAt)
	e.Version, e.Data = t.Version, data
	return &t, []events.Envelope{e}, nil
}
