package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Task checkpoints (ADR 026): not to be confused with the reactors'
// positions in the log (checkpoints.go).

const checkpointColumns = `c.task_id, c.state, c.size_bytes, c.worker_id, c.checkpointed_at, c.saves, c.version`

func scanCheckpoint(r pgx.CollectableRow) (events.TaskCheckpoint, error) {
	var c events.TaskCheckpoint
	err := r.Scan(&c.TaskID, &c.State, &c.SizeBytes, &c.WorkerID, &c.CheckpointedAt, &c.Saves, &c.Version)
	c.CheckpointedAt = c.CheckpointedAt.UTC()
	return c, err
}

// chainCheckpoint walks up from a task through the attempts it retries,
// nearest first, and takes the first checkpoint found: attempts follow one
// another, so the nearest attempt with a checkpoint saved the latest one.
const chainCheckpoint = `WITH RECURSIVE up AS (
    SELECT id, parent_task_id, 0 AS depth FROM worker_tasks WHERE id = $1
    UNION ALL
    SELECT p.id, p.parent_task_id, up.depth + 1 FROM worker_tasks p JOIN up ON p.id = up.parent_task_id
     WHERE up.depth < $2
)
SELECT ` + checkpointColumns + ` FROM up JOIN task_checkpoints c ON c.task_id = up.id
 ORDER BY up.depth LIMIT 1`

// LatestTaskCheckpoint returns the latest checkpoint of task id's retry chain
// (its own, else its nearest earlier attempt's); nil when none has one.
func (db *DB) LatestTaskCheckpoint(ctx context.Context, q Querier, id string) (*events.TaskCheckpoint, error) {
	rows, err := q.Query(ctx, chainCheckpoint, id, maxChainDepth)
	if err != nil {
		return nil, mapErr(fmt.Errorf("chain checkpoint: %w", err))
	}
	c, err := pgx.CollectExactlyOneRow(rows, scanCheckpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("chain checkpoint: %w", err))
	}
	return &c, nil
}

// CheckpointSaved is the answer to a checkpoint's save.
type CheckpointSaved struct {
	TaskID         string    `json:"task_id"`
	SizeBytes      int       `json:"size_bytes" doc:"the state's size as stored: compact JSON"`
	CheckpointedAt time.Time `json:"checkpointed_at"`
	Version        int       `json:"version"`
}

// SaveTaskCheckpoint records state as the latest checkpoint of task id,
// saved by workerID, which must hold the task in progress.
func (db *DB) SaveTaskCheckpoint(ctx context.Context, id, workerID string, state []byte, meta events.Meta) (*CheckpointSaved, error) {
	_, evs, err := db.UpdateTask(ctx, db.pool, id, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Checkpoint(workerID, state)
	})
	if err != nil {
		return nil, err
	}
	e := evs[len(evs)-1]
	p := e.Payload.(events.TaskCheckpointed)
	return &CheckpointSaved{TaskID: id, SizeBytes: p.SizeBytes, CheckpointedAt: e.OccurredAt.UTC(), Version: e.Version}, nil
}
