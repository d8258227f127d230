package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/events"
)

// createRequest is one task creation.
type createRequest struct {
	params NewTaskParams
	meta   events.Meta
}

// CreateTask creates a task; params must already satisfy the type's schema.
// A missing or archived type or a missing assignee is a validation error on
// that field. Outside a caller's transaction, concurrent creations share
// one round trip and one commit (see batcher).
func (db *DB) CreateTask(ctx context.Context, q Querier, p NewTaskParams, meta events.Meta) (*events.Task, error) {
	if pool, ok := q.(*pgxpool.Pool); !ok || pool != db.pool {
		return db.createTask(ctx, q, p, meta)
	}
	return db.creations.do(ctx, createRequest{params: p, meta: meta})
}

// createTask creates one task in the caller's transaction q.
func (db *DB) createTask(ctx context.Context, q Querier, p NewTaskParams, meta events.Meta) (*events.Task, error) {
	tt := p.TaskType
	if tt == nil {
		var err error
		tt, err = db.GetTaskType(ctx, q, p.TaskTypeID)
		if errors.Is(err, events.ErrNotFound) {
			return nil, events.Invalid("task_type_id", "no task type %s", p.TaskTypeID)
		}
		if err != nil {
			return nil, err
		}
	}
	if p.AssignedTo != "" {
		if err := db.checkWorker(ctx, q, p.AssignedTo, "assigned_to"); err != nil {
			return nil, err
		}
	}
	ps, err := events.NewTask(p.NewTaskParams, tt)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new task id: %w", err)
	}
	t, _, err := db.appendTask(ctx, q, id.String(), nil, ps, meta)
	return t, err
}

// createBatch creates a batch of tasks: one round trip reads their types
// (unless handed over) and assignees, one implicit transaction writes them.
// Each task is checked on its own; one that fails a check gets its error
// and is not written.
func (db *DB) createBatch(ctx context.Context, reqs []createRequest) ([]outcome[*events.Task], error) {
	types, workers, err := db.typesAndWorkers(ctx, reqs)
	if err != nil {
		return nil, err
	}
	outs := make([]outcome[*events.Task], len(reqs))
	b := &pgx.Batch{}
	var evs []events.Envelope
	now := db.Now()
	for i, r := range reqs {
		p := r.params
		tt := p.TaskType
		if tt == nil {
			tt = types[canonicalUUID(p.TaskTypeID)]
		}
		switch {
		case tt == nil:
			outs[i].err = events.Invalid("task_type_id", "no task type %s", p.TaskTypeID)
			continue
		case p.AssignedTo != "" && !workers[canonicalUUID(p.AssignedTo)]:
			outs[i].err = events.Invalid("assigned_to", "no worker %s", p.AssignedTo)
			continue
		}
		ps, err := events.NewTask(p.NewTaskParams, tt)
		if err != nil {
			outs[i].err = err
			continue
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new task id: %w", err)
		}
		t, tevs, err := projectStream(b, now, events.StreamTask, id.String(), nil, ps, r.meta, db.projector.Task)
		if err != nil {
			outs[i].err = err
			continue
		}
		outs[i].res = t
		evs = append(evs, tevs...)
	}
	if len(evs) == 0 {
		return outs, nil
	}
	if err := queueEvents(b, evs); err != nil {
		return nil, err
	}
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	db.metrics.observe(evs, nil)
	db.afterCommit()
	return outs, nil
}

// canonicalUUID is id as PostgreSQL prints it, the key of what the batch
// reads; id itself when it is no UUID (the read fails on it then).
func canonicalUUID(id string) string {
	u, err := uuid.Parse(id)
	if err != nil {
		return id
	}
	return u.String()
}

// typesAndWorkers reads, in one round trip, the task types the requests
// name (those the caller did not hand over) and which of their assignees
// are workers; nothing when there is nothing to read.
func (db *DB) typesAndWorkers(ctx context.Context, reqs []createRequest) (map[string]*events.TaskType, map[string]bool, error) {
	var typeIDs, assignees []string
	for _, r := range reqs {
		if r.params.TaskType == nil {
			typeIDs = append(typeIDs, r.params.TaskTypeID)
		}
		if r.params.AssignedTo != "" {
			assignees = append(assignees, r.params.AssignedTo)
		}
	}
	if len(typeIDs) == 0 && len(assignees) == 0 {
		return map[string]*events.TaskType{}, map[string]bool{}, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+taskTypeColumns+` FROM task_types tt WHERE tt.id = ANY($1::uuid[])`, typeIDs)
	b.Queue(`SELECT id::text FROM users WHERE id = ANY($1::uuid[]) AND is_worker AND active`, assignees)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()

	types := map[string]*events.TaskType{}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("create task: read types: %w", err)
	}
	for rows.Next() {
		tt := &events.TaskType{}
		if err := rows.Scan(taskTypeDest(tt)...); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("create task: read types: %w", err)
		}
		tt.CreatedAt, tt.UpdatedAt = tt.CreatedAt.UTC(), tt.UpdatedAt.UTC()
		types[tt.ID] = tt
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("create task: read types: %w", err)
	}
	workers := map[string]bool{}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("create task: read assignees: %w", err)
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { workers[id] = true; return nil }); err != nil {
		return nil, nil, fmt.Errorf("create task: read assignees: %w", err)
	}
	return types, workers, br.Close()
}
