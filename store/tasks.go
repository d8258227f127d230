package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// taskColumns reads a worker_tasks row in scanTask's order.
const taskColumns = `t.id, t.title, t.description, t.task_type_id, t.params, t.priority, t.status,
 t.assigned_to, t.result, t.retry_count, t.parent_task_id, t.created_by, t.created_at,
 t.started_at, t.completed_at, t.updated_at, t.available_at, t.failure_kind,
 t.failure_reason, t.retry_outcome, t.retry_task_id, t.version, t.schedule_id, t.schedule_run, t.unique_key, t.scheduled, t.checkpointed_at,
 t.depends_on, t.on_dependency_failure, t.workflow_id, t.ref`

func taskDest(t *events.Task) []any {
	return []any{&t.ID, &t.Title, &t.Description, &t.TaskTypeID, &t.Params, &t.Priority, &t.Status,
		&t.AssignedTo, &t.Result, &t.RetryCount, &t.ParentTaskID, &t.CreatedBy, &t.CreatedAt,
		&t.StartedAt, &t.CompletedAt, &t.UpdatedAt, &t.AvailableAt, &t.FailureKind,
		&t.FailureReason, &t.RetryOutcome, &t.RetryTaskID, &t.Version, &t.ScheduleID, &t.ScheduleRun, &t.UniqueKey, &t.Scheduled, &t.CheckpointedAt,
		&t.DependsOn, &t.OnDependencyFailure, &t.WorkflowID, &t.Ref}
}

// GetTask reads a task; a *events.NotFoundError when there is none.
func (db *DB) GetTask(ctx context.Context, q Querier, id string) (*events.Task, error) {
	var t events.Task
	err := q.QueryRow(ctx, `SELECT `+taskColumns+` FROM worker_tasks t WHERE t.id = $1`, id).Scan(taskDest(&t)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("task", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("get task: %w", err))
	}
	normalizeTask(&t)
	return &t, nil
}

// normalizeTask makes timestamps UTC so a read row equals the fold.
func normalizeTask(t *events.Task) {
	t.CreatedAt, t.UpdatedAt, t.AvailableAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC(), t.AvailableAt.UTC()
	if t.StartedAt != nil {
		u := t.StartedAt.UTC()
		t.StartedAt = &u
	}
	if t.CompletedAt != nil {
		u := t.CompletedAt.UTC()
		t.CompletedAt = &u
	}
	if t.CheckpointedAt != nil {
		u := t.CheckpointedAt.UTC()
		t.CheckpointedAt = &u
	}
}

// TaskDecision decides a command on the current state of a task.
type TaskDecision func(t *events.Task) ([]events.Payload, error)

// maxRaces bounds how often a command is re-decided after losing a race.
const maxRaces = 5

// UpdateTask runs one command on task id: read the row, decide, append the
// events and the projections in one batch. Outside a transaction a lost race
// (another write to the same stream) re-reads and decides again; inside one,
// the conflict aborts the caller's transaction and is returned.
func (db *DB) UpdateTask(ctx context.Context, q Querier, id string, meta events.Meta, decide TaskDecision) (*events.Task, []events.Envelope, error) {
	q = db.ambient(ctx, q)
	_, inTx := q.(pgx.Tx)
	for attempt := 1; ; attempt++ {
		t, err := db.GetTask(ctx, q, id)
		if err != nil {
			return nil, nil, err
		}
		ps, err := decide(t)
		if err != nil {
			return nil, nil, err
		}
		after, evs, err := db.appendTask(ctx, q, id, t, ps, meta)
		if errors.Is(err, events.ErrConflict) && !inTx && attempt < maxRaces {
			continue
		}
		return after, evs, err
	}
}

// NewTaskParams creates a task of type TaskTypeID.
type NewTaskParams struct {
	events.NewTaskParams
	TaskTypeID string
	// TaskType, when the caller has just read it (the API does, for the
	// params schema), saves the store reading it again.
	TaskType *events.TaskType
	// ID, when set, is the new task's id (a workflow names its tasks
	// before it creates them, so they can depend on each other).
	ID string
}

// AssignTask gives a pending task to a worker, with a reason.
func (db *DB) AssignTask(ctx context.Context, q Querier, id, workerID, reason string, meta events.Meta) (*events.Task, error) {
	if err := db.checkWorker(ctx, q, workerID, "assigned_to"); err != nil {
		return nil, err
	}
	t, _, err := db.UpdateTask(ctx, q, id, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Assign(workerID, meta.Actor.ID, reason)
	})
	return t, err
}

// checkWorker makes sure id names a worker user; field is blamed if not.
func (db *DB) checkWorker(ctx context.Context, q Querier, id, field string) error {
	var isWorker, active bool
	err := q.QueryRow(ctx, `SELECT is_worker, active FROM users WHERE id = $1`, id).Scan(&isWorker, &active)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !isWorker) {
		return events.UnknownReference(field, "worker", id)
	}
	if err == nil && !active {
		return events.Invalid(field, "worker %s is deactivated", id)
	}
	return mapErr(err)
}
