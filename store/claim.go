package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskWithType is a task with its type embedded: what a worker needs to run it.
type TaskWithType struct {
	events.Task
	TaskType *events.TaskType `json:"task_type"`
	// PreviousAttempts is, for a retry, what happened before (see
	// DB.PreviousAttempts); the API fills it, the claim never reads it.
	PreviousAttempts []Attempt `json:"previous_attempts,omitempty"`
}

// lockWorker serializes one worker's claims so its capacity holds under
// concurrent claims; it is the batch's first statement, so the claim that
// follows takes its snapshot after any earlier claim by the same worker
// committed.
const lockWorker = `SELECT max_concurrent_tasks FROM users WHERE id = $1 AND is_worker FOR NO KEY UPDATE`

// claimTask is the claim (DESIGN §3): pick the first claimable task with
// SKIP LOCKED (tasks assigned to the worker first, then the pool, which is
// only scanned when there is none; priority, then FIFO), unless the worker
// is at capacity; mark it in progress; append task.claimed and the
// assignment row, all in one statement. Both gates are one-time filters:
// a worker at capacity locks nothing.
//
// held's status is a parameter ($5, always 'in_progress'), not a literal,
// for the plan: with the literal, a generic plan built while few tasks are
// in progress (a fresh or bursty queue, pages not yet all-visible) counts
// through worker_tasks_status, reading every task in progress of every
// worker and its dead index entries on each claim (seen in taskctl bench:
// 40-80 buffers instead of 4). A parameter's generic estimate is a whole
// status's share of the table, so the plan is always worker_tasks_holder
// on (assigned_to, status): this worker's rows only.
const claimTask = `WITH held AS (
    SELECT count(*) AS n FROM worker_tasks WHERE assigned_to = $1 AND status = $5
), cap AS (
    SELECT max_concurrent_tasks AS m FROM users WHERE id = $1
), mine AS (
    SELECT id FROM worker_tasks
     WHERE status = 'pending' AND assigned_to = $1 AND available_at <= $2
       AND (SELECT n FROM held) < (SELECT m FROM cap)
     ORDER BY priority_rank, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
), pool AS (
    SELECT id FROM worker_tasks
     WHERE status = 'pending' AND assigned_to IS NULL AND available_at <= $2
       AND (SELECT n FROM held) < (SELECT m FROM cap) AND NOT EXISTS (SELECT 1 FROM mine)
     ORDER BY priority_rank, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id FROM mine UNION ALL SELECT id FROM pool
), t AS (
    UPDATE worker_tasks w
       SET status = 'in_progress', assigned_to = $1, started_at = $2, updated_at = $2, version = w.version + 1
      FROM picked WHERE w.id = picked.id
    RETURNING w.*
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', t.id, t.version, 'task.claimed', $3::jsonb, $4::jsonb, $2 FROM t
), asg AS (
    INSERT INTO task_assignments (task_id, version, worker_id, assigned_by, kind, reason, at)
    SELECT t.id, t.version, $1, $1, 'claimed', '', $2 FROM t
)
SELECT ` + taskColumns + `, ` + taskTypeColumns + `
  FROM t JOIN task_types tt ON tt.id = t.task_type_id`

// Claim gives workerID its next task, or nil when nothing is claimable or
// the worker is at its max_concurrent_tasks.
func (db *DB) Claim(ctx context.Context, workerID string, meta events.Meta) (*TaskWithType, error) {
	data, err := json.Marshal(events.TaskClaimed{WorkerID: workerID})
	if err != nil {
		return nil, err
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue(lockWorker, workerID)
	b.Queue(claimTask, workerID, db.Now(), string(data), string(metaJSON), string(events.StatusInProgress))
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()

	var limit int
	if err := br.QueryRow().Scan(&limit); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s is not a worker", events.ErrForbidden, workerID)
		}
		return nil, mapErr(fmt.Errorf("claim: lock worker: %w", err))
	}
	var out TaskWithType
	out.TaskType = &events.TaskType{}
	dest := append(taskDest(&out.Task), taskTypeDest(out.TaskType)...)
	err = br.QueryRow().Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, br.Close()
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("claim: %w", err))
	}
	if err := br.Close(); err != nil {
		return nil, mapErr(fmt.Errorf("claim: %w", err))
	}
	normalizeTask(&out.Task)
	db.afterCommit()
	return &out, nil
}
