package api

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The admin commands, called by the JSON handlers and by the admin UI
// (api/ui) alike: one validation, one set of events, one set of errors. The
// meta names the acting admin. Each counts its events for /metrics.

// Request bodies of the commands, exported for the admin UI.
type (
	CreateTaskRequest   = createTaskRequest
	EditTaskRequest     = editTaskRequest
	AssignRequest       = assignRequest
	TaskTypeRequest     = taskTypeRequest
	CreateWorkerRequest = createWorkerRequest
)

// CreateWorker registers a worker user.
func (s *Server) CreateWorker(ctx context.Context, req CreateWorkerRequest, meta events.Meta) (*events.User, error) {
	// The admin UI builds req: the same checks as a JSON body (0 tasks at
	// once is refused, not read as the default).
	if err := validateShape(&req); err != nil {
		return nil, err
	}
	limit := 0 // the default, 1 (events.RegisterUser)
	if req.MaxConcurrentTasks != nil {
		limit = *req.MaxConcurrentTasks
	}
	hash, err := s.HashPassword(req.Password)
	if err != nil {
		return nil, err
	}
	u, err := s.db.CreateUser(ctx, events.UserRegistered{
		Email: req.Email, FullName: req.FullName, IsWorker: req.IsWorker == nil || *req.IsWorker, IsAdmin: req.IsAdmin,
		MaxConcurrentTasks: limit,
	}, req.Password, hash, meta)
	if err != nil {
		return nil, err
	}
	return u, nil
}

// CreateTaskType defines a type of work.
func (s *Server) CreateTaskType(ctx context.Context, req TaskTypeRequest, meta events.Meta) (*events.TaskType, error) {
	spec, err := req.spec()
	if err != nil {
		return nil, err
	}
	tt, err := s.db.CreateTaskType(ctx, spec, meta)
	if err != nil {
		return nil, err
	}
	return tt, nil
}

// UpdateTaskType replaces a type's definition.
func (s *Server) UpdateTaskType(ctx context.Context, id string, req TaskTypeRequest, meta events.Meta) (*events.TaskType, error) {
	spec, err := req.spec()
	if err != nil {
		return nil, err
	}
	tt, err := s.db.UpdateTaskType(ctx, id, meta,
		func(tt *events.TaskType) ([]events.Payload, error) { return tt.Update(spec) })
	if err != nil {
		return nil, err
	}
	return tt, nil
}

// ArchiveTaskType stops a type from taking new tasks.
func (s *Server) ArchiveTaskType(ctx context.Context, id string, meta events.Meta) (*events.TaskType, error) {
	tt, err := s.db.UpdateTaskType(ctx, id, meta,
		func(tt *events.TaskType) ([]events.Payload, error) { return tt.Archive() })
	if err != nil {
		return nil, err
	}
	return tt, nil
}

// PauseTaskType stops claims of a type's tasks; they stay pending. The
// actor (an admin, or a part of the system such as a budget) and the
// reason are recorded on task_type.paused.
func (s *Server) PauseTaskType(ctx context.Context, id, reason string, meta events.Meta) (*events.TaskType, error) {
	return s.db.UpdateTaskType(ctx, id, meta,
		func(tt *events.TaskType) ([]events.Payload, error) { return tt.Pause(meta.Actor.ID, reason) })
}

// ResumeTaskType lets claims take a paused type's tasks again; its commit
// wakes the waiting workers.
func (s *Server) ResumeTaskType(ctx context.Context, id, reason string, meta events.Meta) (*events.TaskType, error) {
	return s.db.UpdateTaskType(ctx, id, meta,
		func(tt *events.TaskType) ([]events.Payload, error) { return tt.Resume(meta.Actor.ID, reason) })
}

// CreateTask creates a task; its params are checked against its type's
// schema. A unique key another task holds is an *events.DuplicateTaskError,
// or that task (created false) when the request says on_duplicate
// "existing".
func (s *Server) CreateTask(ctx context.Context, req CreateTaskRequest, meta events.Meta) (t *events.Task, created bool, err error) {
	return s.createTaskOf(ctx, req, meta, typeCache{})
}

// createTaskOf is CreateTask that leaves the task's type in types.
func (s *Server) createTaskOf(ctx context.Context, req CreateTaskRequest, meta events.Meta, types typeCache) (t *events.Task, created bool, err error) {
	p, err := s.taskParams(ctx, req, meta, types)
	if err != nil {
		return nil, false, err
	}
	t, err = s.db.CreateTask(ctx, s.db.Pool(), p, meta)
	return s.orExisting(ctx, req, t, err)
}

// orExisting is a creation's answer: the new task, or for a duplicate the
// task holding the key when the request says on_duplicate "existing".
func (s *Server) orExisting(ctx context.Context, req CreateTaskRequest, t *events.Task, err error) (*events.Task, bool, error) {
	var dup *events.DuplicateTaskError
	if errors.As(err, &dup) && req.OnDuplicate == onDuplicateExisting {
		existing, gerr := s.db.GetTask(ctx, s.db.Pool(), dup.TaskID)
		return existing, false, gerr
	}
	if err != nil {
		return nil, false, err
	}
	return t, true, nil
}

// typeCache keeps the task types one request has read, by id.
type typeCache map[string]*events.TaskType

// taskParams checks a creation request (its type, its params against the
// type's schema, its unique key) into the store's parameters.
func (s *Server) taskParams(ctx context.Context, req CreateTaskRequest, meta events.Meta, types typeCache) (store.NewTaskParams, error) {
	if req.TaskTypeID == "" {
		return store.NewTaskParams{}, events.Invalid("task_type_id", "is required")
	}
	typeID, err := parseUUID("task_type_id", req.TaskTypeID)
	if err != nil {
		return store.NewTaskParams{}, err
	}
	assignee, err := optionalUUID("assigned_to", req.AssignedTo)
	if err != nil {
		return store.NewTaskParams{}, err
	}
	runAt, err := optionalTimestamp("run_at", req.RunAt)
	if err != nil {
		return store.NewTaskParams{}, err
	}
	window, err := req.uniqueFor()
	if err != nil {
		return store.NewTaskParams{}, err
	}
	if err := events.ValidateUnique(req.UniqueKey, window); err != nil {
		return store.NewTaskParams{}, err
	}
	if err := events.ValidateDependencies(req.DependsOn, req.OnDependencyFailure); err != nil {
		return store.NewTaskParams{}, err
	}
	switch req.OnDuplicate {
	case "", onDuplicateError, onDuplicateExisting:
	default:
		return store.NewTaskParams{}, events.Invalid("on_duplicate", "must be error or existing")
	}
	tt, ok := types[typeID]
	if !ok {
		tt, err = s.db.GetTaskType(ctx, s.db.Pool(), typeID)
		if err != nil && !isNotFound(err) {
			return store.NewTaskParams{}, err
		}
		types[typeID] = tt
	}
	if tt == nil {
		return store.NewTaskParams{}, events.UnknownReference("task_type_id", "task type", typeID)
	}
	if tt.Archived { // before the schema: no params can make this task valid
		return store.NewTaskParams{}, events.Unusable("task_type_id", "task type %s is archived", tt.Name)
	}
	if err := s.schemas.validate(tt, req.Params); err != nil {
		return store.NewTaskParams{}, err
	}
	createdBy := meta.Actor.ID
	if meta.Actor.Kind == events.ActorTelegram {
		createdBy = "" // created_by names a user of this service; the event's actor names the Telegram user
	}
	return store.NewTaskParams{TaskTypeID: typeID, TaskType: tt, NewTaskParams: events.NewTaskParams{
		Title: req.Title, Description: req.Description, Params: req.Params, Priority: req.Priority,
		AssignedTo: assignee, AssignReason: req.Reason, CreatedBy: createdBy,
		UniqueKey: req.UniqueKey, UniqueFor: window, AvailableAt: runAt,
		DependsOn: req.DependsOn, OnDependencyFailure: req.OnDependencyFailure,
	}}, nil
}

// taskCommand runs decide on task id as meta's admin.
func (s *Server) taskCommand(ctx context.Context, id string, meta events.Meta, decide func(t *events.Task) ([]events.Payload, error)) (*events.Task, error) {
	t, _, err := s.db.UpdateTask(ctx, s.db.Pool(), id, meta, decide)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// EditTask changes a pending task; new params are checked against its type.
func (s *Server) EditTask(ctx context.Context, id string, req EditTaskRequest, meta events.Meta) (*events.Task, error) {
	runAt, err := optionalTimestamp("run_at", req.RunAt)
	if err != nil {
		return nil, err
	}
	if req.Params != nil {
		t, err := s.db.GetTaskWithType(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := s.schemas.validate(t.TaskType, req.Params); err != nil {
			return nil, err
		}
	}
	return s.taskCommand(ctx, id, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Edit(events.TaskEdit{Title: req.Title, Description: req.Description, Params: req.Params, Priority: req.Priority,
			RunAt: runAt})
	})
}

// CancelTask cancels a task with a reason.
func (s *Server) CancelTask(ctx context.Context, id, reason string, meta events.Meta) (*events.Task, error) {
	return s.taskCommand(ctx, id, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Cancel(meta.Actor.ID, reason)
	})
}

// AssignTask gives a pending task to a worker.
func (s *Server) AssignTask(ctx context.Context, id string, req AssignRequest, meta events.Meta) (*events.Task, error) {
	if req.AssignedTo == "" {
		return nil, events.Invalid("assigned_to", "is required")
	}
	worker, err := parseUUID("assigned_to", req.AssignedTo)
	if err != nil {
		return nil, err
	}
	t, err := s.db.AssignTask(ctx, s.db.Pool(), id, worker, req.Reason, meta)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// RetryTask creates the retry of a failed task now, by hand: allowed unless
// the task already has a retry (after the automatic decision skipped or
// exhausted, too). The retry reactor may record its decision on the failed
// task at the same moment: that race is run again, not answered with a 409.
func (s *Server) RetryTask(ctx context.Context, id, hint string, meta events.Meta) (*events.Task, error) {
	if events.TooLong(hint, maxRetryHint) {
		return nil, events.Invalid("hint", "is longer than %d characters", maxRetryHint)
	}
	var retry *events.Task
	err := s.db.WithTxRetrying(ctx, func(tx pgx.Tx) error {
		var err error
		retry, err = s.db.CreateRetry(ctx, tx, id, store.RetryParams{Hint: strings.TrimSpace(hint), Manual: true, Meta: meta})
		return err
	})
	if err != nil {
		return nil, err
	}
	return retry, nil
}
