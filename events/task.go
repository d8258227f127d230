package events

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Status is a task's place in its lifecycle.
type Status string

const (
	// StatusBlocked: waiting for its dependencies; not claimable.
	StatusBlocked    Status = "blocked"
	StatusPending    Status = "pending"
	StatusInProgress Status = "in_progress"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
	StatusCancelled  Status = "cancelled"
)

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	switch s {
	case StatusBlocked, StatusPending, StatusInProgress, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Terminal reports whether no worker can act on the task any more.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Priority orders the queue: urgent before high before medium before low.
type Priority string

const (
	PriorityUrgent Priority = "urgent"
	PriorityHigh   Priority = "high"
	PriorityMedium Priority = "medium"
	PriorityLow    Priority = "low"
)

// Rank is the claim order (0 first); -1 for an unknown priority.
func (p Priority) Rank() int {
	switch p {
	case PriorityUrgent:
		return 0
	case PriorityHigh:
		return 1
	case PriorityMedium:
		return 2
	case PriorityLow:
		return 3
	}
	return -1
}

// Retry outcomes recorded on a failed task.
const (
	RetryOutcomeRetried   = "retried"
	RetryOutcomeSkipped   = "skipped"
	RetryOutcomeExhausted = "exhausted"
)

// Task is the fold of a task stream; the worker_tasks row is exactly this.
type Task struct {
	ID           string          `json:"id"`
	Title        string          `json:"title"`
	Description  string          `json:"description"`
	TaskTypeID   string          `json:"task_type_id"`
	Params       json.RawMessage `json:"params"`
	Priority     Priority        `json:"priority"`
	Status       Status          `json:"status"`
	AssignedTo   *string         `json:"assigned_to"`
	Result       json.RawMessage `json:"result" openapi:"any"`
	RetryCount   int             `json:"retry_count"`
	ParentTaskID *string         `json:"parent_task_id"`
	CreatedBy    *string         `json:"created_by"`
	CreatedAt    time.Time       `json:"created_at"`
	StartedAt    *time.Time      `json:"started_at"`
	CompletedAt  *time.Time      `json:"completed_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	AvailableAt  time.Time       `json:"available_at"`
	// Scheduled: pending and not claimable before AvailableAt, its run_at.
	// task.due clears it when that time comes (DESIGN §13).
	Scheduled     bool    `json:"scheduled"`
	FailureKind   *string `json:"failure_kind" openapi:"enum=error|worker_offline|timeout"`
	FailureReason *string `json:"failure_reason"`
	RetryOutcome  *string `json:"retry_outcome" openapi:"enum=retried|skipped|exhausted"`
	RetryTaskID   *string `json:"retry_task_id"`
	ScheduleID    *string `json:"schedule_id"`
	ScheduleRun   *int    `json:"schedule_run"`
	UniqueKey     *string `json:"unique_key"`
	// CheckpointedAt is when the task's latest checkpoint was saved (nil:
	// none): a claim reads the checkpoint only for a task that has one or
	// is a retry, so the common claim pays nothing.
	CheckpointedAt *time.Time `json:"checkpointed_at"`
	Version        int        `json:"version"`
	// DependsOn are the tasks this one waited or waits for, as given; each
	// counts done when the latest task of its retry chain completed.
	DependsOn []string `json:"depends_on,omitempty"`
	// OnDependencyFailure: "wait" keeps the task blocked for an admin when
	// a dependency's chain ends without completing; nil cancels it.
	OnDependencyFailure *string `json:"on_dependency_failure" openapi:"enum=wait"`
	WorkflowID          *string `json:"workflow_id"`
	// Ref names the task inside its workflow.
	Ref *string `json:"ref"`
}

// HeldBy reports whether workerID holds (or was assigned) the task.
func (t *Task) HeldBy(workerID string) bool {
	return t.AssignedTo != nil && *t.AssignedTo == workerID
}

// Apply folds one event of the task's stream into t. It never fails: events
// were validated before they existed.
func (t *Task) Apply(e Envelope) {
	at := e.OccurredAt
	switch p := e.Payload.(type) {
	case TaskCompacted:
		// A snapshot: the state as it was, at the compaction's version.
		*t = p.Task
		t.ID = e.StreamID
		t.Params = json.RawMessage(`{}`) // dropped
		t.Result = nil
		t.Version = e.Version
		return
	case TaskCreated:
		*t = Task{
			ID: e.StreamID, Title: p.Title, Description: p.Description, TaskTypeID: p.TaskTypeID,
			Params: p.Params, Priority: p.Priority, Status: StatusPending, RetryCount: p.RetryCount,
			ParentTaskID: optional(p.ParentTaskID), CreatedBy: optional(p.CreatedBy),
			CreatedAt: at, AvailableAt: at, ScheduleID: optional(p.ScheduleID),
			UniqueKey: optional(p.UniqueKey), DependsOn: p.DependsOn,
			OnDependencyFailure: optional(p.OnDependencyFailure), WorkflowID: optional(p.WorkflowID), Ref: optional(p.Ref),
		}
		if p.Blocked {
			t.Status = StatusBlocked
		}
		if p.ScheduleID != "" {
			run := p.ScheduleRun
			t.ScheduleRun = &run
		}
		if p.AvailableAt != nil {
			t.AvailableAt = p.AvailableAt.UTC()
			t.Scheduled = t.AvailableAt.After(at)
		}
	case TaskDue:
		t.Scheduled = false
	case TaskUnblocked:
		t.Status = StatusPending
		t.Scheduled = t.AvailableAt.After(at)
	case TaskAssigned:
		t.AssignedTo = optional(p.WorkerID)
	case TaskClaimed:
		t.Status = StatusInProgress
		t.AssignedTo = optional(p.WorkerID)
		t.StartedAt = &at
	case TaskReleased:
		t.Status = StatusPending
		t.AssignedTo = nil
		t.StartedAt = nil
	case TaskResultPosted:
		t.Result = p.Result
	case TaskCompleted:
		t.Status = StatusCompleted
		t.CompletedAt = &at
	case TaskFailed:
		t.Status = StatusFailed
		t.CompletedAt = &at
		t.FailureKind = optional(p.Kind)
		t.FailureReason = &p.Reason
	case TaskCancelled:
		t.Status = StatusCancelled
		t.CompletedAt = &at
	case TaskRetried:
		t.RetryOutcome = optional(RetryOutcomeRetried)
		t.RetryTaskID = optional(p.RetryTaskID)
	case TaskRetrySkipped:
		t.RetryOutcome = optional(RetryOutcomeSkipped)
	case TaskRetriesExhausted:
		t.RetryOutcome = optional(RetryOutcomeExhausted)
	case TaskEdited:
		t.Title, t.Description, t.Params, t.Priority = p.Title, p.Description, p.Params, p.Priority
		if p.AvailableAt != nil {
			t.AvailableAt = p.AvailableAt.UTC()
			t.Scheduled = t.AvailableAt.After(at)
		}
	case TaskCheckpointed:
		t.CheckpointedAt = &at
	case TaskUpdatePosted:
		// The thread lives in worker_task_updates; the task only moves its clock.
	}
	if t.Status != StatusPending {
		t.Scheduled = false
	}
	t.Version = e.Version
	t.UpdatedAt = at
}

// FoldTask folds a whole stream; nil when it is empty.
func FoldTask(stream []Envelope) *Task {
	if len(stream) == 0 {
		return nil
	}
	t := &Task{}
	for _, e := range stream {
		t.Apply(e)
	}
	return t
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Limits on what clients send.
const (
	MaxTitleLen       = 500
	MaxDescriptionLen = 100_000
	MaxMessageLen     = 20_000
	MaxReasonLen      = 10_000
	MaxUniqueKeyLen   = 200
	// MaxUniqueFor bounds a unique key's window.
	MaxUniqueFor = 366 * 24 * time.Hour
)

// NewTaskParams is what creating a task needs.
type NewTaskParams struct {
	Title        string
	Description  string
	Params       json.RawMessage
	Priority     Priority
	AssignedTo   string
	AssignReason string
	CreatedBy    string
	RetryCount   int
	ParentTaskID string
	// AvailableAt is the task's run_at: it stays pending and is not
	// claimable before then (a retry's backoff is one).
	AvailableAt *time.Time
	ScheduleID  string
	ScheduleRun int
	// UniqueKey, when set, makes the task unique among its type's tasks
	// that are pending or in progress; UniqueFor (needs a key) also among
	// those completed within that long.
	UniqueKey string
	UniqueFor time.Duration
	// DependsOn are task ids (at most MaxDependencies); Blocked says some
	// are not done yet, which the store decides under lock.
	DependsOn           []string
	OnDependencyFailure string
	Blocked             bool
	WorkflowID          string
	Ref                 string
}

// NewTask decides the events that create a task of type tt. Params must
// already satisfy the type's schema (the caller holds the compiled schema).
func NewTask(p NewTaskParams, tt *TaskType) ([]Payload, error) {
	title := strings.TrimSpace(p.Title)
	if title == "" {
		return nil, Invalid("title", "is required")
	}
	if utf8.RuneCountInString(title) > MaxTitleLen {
		return nil, Invalid("title", "is longer than %d characters", MaxTitleLen)
	}
	if TooLong(p.Description, MaxDescriptionLen) {
		return nil, Invalid("description", "is longer than %d characters", MaxDescriptionLen)
	}
	if p.Priority == "" {
		p.Priority = PriorityMedium
	}
	if p.Priority.Rank() < 0 {
		return nil, Invalid("priority", "must be one of urgent, high, medium, low")
	}
	if tt == nil {
		return nil, Invalid("task_type_id", "is required")
	}
	if tt.Archived {
		return nil, Unusable("task_type_id", "task type %s is archived", tt.Name)
	}
	params, err := objectParams(p.Params)
	if err != nil {
		return nil, err
	}
	if p.AvailableAt != nil {
		if err := checkTime("run_at", *p.AvailableAt); err != nil {
			return nil, err
		}
		at := p.AvailableAt.UTC()
		p.AvailableAt = &at
	}
	if err := ValidateUnique(p.UniqueKey, p.UniqueFor); err != nil {
		return nil, err
	}
	if err := ValidateDependencies(p.DependsOn, p.OnDependencyFailure); err != nil {
		return nil, err
	}
	if len(p.DependsOn) == 0 {
		p.DependsOn = nil // none is NULL in the row, as in the fold
	}
	if len(p.DependsOn) > 0 && p.UniqueKey != "" {
		return nil, Invalid("unique_key", "cannot be combined with depends_on")
	}
	if p.OnDependencyFailure != OnDependencyFailureWait {
		p.OnDependencyFailure = ""
	}
	created := TaskCreated{
		Title: title, Description: p.Description, TaskTypeID: tt.ID, Params: params,
		Priority: p.Priority, RetryCount: p.RetryCount, ParentTaskID: p.ParentTaskID,
		CreatedBy: p.CreatedBy, AvailableAt: p.AvailableAt, ScheduleID: p.ScheduleID, ScheduleRun: p.ScheduleRun,
		UniqueKey: p.UniqueKey, DependsOn: p.DependsOn, OnDependencyFailure: p.OnDependencyFailure,
		Blocked: p.Blocked && len(p.DependsOn) > 0, WorkflowID: p.WorkflowID, Ref: p.Ref,
	}
	if p.UniqueFor > 0 {
		created.UniqueFor = p.UniqueFor.String()
	}
	out := []Payload{created}
	if p.AssignedTo != "" {
		out = append(out, TaskAssigned{WorkerID: p.AssignedTo, By: p.CreatedBy, Reason: p.AssignReason})
	}
	return out, nil
}

// ValidateUnique checks a unique key and its window: a key of 1 to 200
// characters that is not only white space, and a window, only with a key,
// from zero (none) to a year.
func ValidateUnique(key string, window time.Duration) error {
	if key != "" {
		if strings.TrimSpace(key) == "" {
			return Invalid("unique_key", "is blank; leave it out or give a key")
		}
		if utf8.RuneCountInString(key) > MaxUniqueKeyLen {
			return Invalid("unique_key", "is longer than %d characters", MaxUniqueKeyLen)
		}
		if !utf8.ValidString(key) {
			return Invalid("unique_key", "is not valid UTF-8")
		}
	}
	switch {
	case window < 0:
		return Invalid("unique_for", "must not be negative")
	case window > MaxUniqueFor:
		return Invalid("unique_for", "must be at most %s", MaxUniqueFor)
	case window > 0 && key == "":
		return Invalid("unique_for", "needs a unique_key")
	}
	return nil
}

// objectParams defaults empty params to {} and insists on a JSON object.
func objectParams(raw json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return json.RawMessage(`{}`), nil
	}
	if trimmed[0] != '{' {
		return nil, Invalid("params", "must be a JSON object")
	}
	return trimmed, nil
}

// Due decides that a scheduled task's run_at has come. The store runs the
// same rule as one SQL statement for every due task (store.MakeDue).
func (t *Task) Due(now time.Time) ([]Payload, error) {
	if t.Status != StatusPending || !t.Scheduled || t.AvailableAt.After(now) {
		return nil, &TransitionError{Command: "make due", Status: t.Status}
	}
	return []Payload{TaskDue{RunAt: t.AvailableAt}}, nil
}

// Claim decides a claim by workerID. The store runs the same rule as one SQL
// statement (SKIP LOCKED); this is the rule it must match.
func (t *Task) Claim(workerID string) ([]Payload, error) {
	if t.AssignedTo != nil && *t.AssignedTo != workerID {
		return nil, ErrForbidden
	}
	if t.Status != StatusPending {
		return nil, &TransitionError{Command: "claim", Status: t.Status}
	}
	return []Payload{TaskClaimed{WorkerID: workerID}}, nil
}

// holder checks that workerID holds the task and that it is in progress.
func (t *Task) holder(workerID, command string) error {
	if !t.HeldBy(workerID) {
		return ErrForbidden
	}
	if t.Status != StatusInProgress {
		return &TransitionError{Command: command, Status: t.Status}
	}
	return nil
}

// MaxTaskEvents bounds a task's history. What its worker adds to it
// (updates, results, checkpoints, data, usage) is refused past it, so a
// worker in a loop cannot fill the database; the task's lifecycle
// (complete, fail, release) and admins' commands never are.
const MaxTaskEvents = 10_000

// Room refuses one more worker addition, named by field, to a task whose
// history is full. A result or usage that comes with the task's completion
// or failure is never refused: the finish is the history's end.
func (t *Task) Room(field string) error {
	if t.Version >= MaxTaskEvents {
		return TooLarge(field, "the task's history holds %d events, the most a task may have; its worker can still complete, fail or release it (post progress less often)", t.Version)
	}
	return nil
}

// Release gives an in-progress task back to the pool.
func (t *Task) Release(workerID, reason string) ([]Payload, error) {
	if err := t.holder(workerID, "release"); err != nil {
		return nil, err
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{TaskReleased{WorkerID: workerID, Reason: reason}}, nil
}

// ReleaseHeld gives back a task held by a worker that cannot work it (being
// deactivated, or offline past the threshold), decided by the system or an
// admin rather than the worker: in progress, or pending and assigned to it
// (nobody else could claim that one).
func (t *Task) ReleaseHeld(workerID, reason string) ([]Payload, error) {
	if !t.HeldBy(workerID) {
		return nil, ErrForbidden
	}
	if t.Status != StatusInProgress && t.Status != StatusPending {
		return nil, &TransitionError{Command: "release", Status: t.Status}
	}
	return []Payload{TaskReleased{WorkerID: workerID, Reason: cut(reason, MaxReasonLen)}}, nil
}

// TooLong says s has more than n characters. Text limits count characters,
// as the OpenAPI document's maxLength does (JSON Schema counts code
// points), not bytes; a password's bcrypt limit is the one in bytes.
func TooLong(s string, n int) bool {
	return len(s) > n && utf8.RuneCountInString(s) > n
}

// cut keeps the first n characters of s.
func cut(s string, n int) string {
	if !TooLong(s, n) {
		return s
	}
	return string([]rune(s)[:n])
}

// PostUpdate adds a message to the task's thread. A worker must hold the
// task; an admin (workerID "") may comment on any task.
func (t *Task) PostUpdate(updateID, authorID, message string, byWorker bool) ([]Payload, error) {
	if byWorker && !t.HeldBy(authorID) {
		return nil, ErrForbidden
	}
	if strings.TrimSpace(message) == "" {
		return nil, Invalid("message", "is required")
	}
	if err := maxLen("message", message, MaxMessageLen); err != nil {
		return nil, err
	}
	if byWorker && t.Status != StatusInProgress {
		return nil, &TransitionError{Command: "post an update to", Status: t.Status}
	}
	if byWorker {
		if err := t.Room("message"); err != nil {
			return nil, err
		}
	}
	return []Payload{TaskUpdatePosted{UpdateID: updateID, AuthorID: authorID, Message: message}}, nil
}

// PostResult stores the worker's structured result (any JSON value).
func (t *Task) PostResult(workerID string, result json.RawMessage) ([]Payload, error) {
	if err := t.holder(workerID, "post a result to"); err != nil {
		return nil, err
	}
	result = bytes.TrimSpace(result)
	if len(result) == 0 || bytes.Equal(result, []byte("null")) {
		return nil, Invalid("result", "is required")
	}
	return []Payload{TaskResultPosted{WorkerID: workerID, Result: result}}, nil
}

// Complete finishes the task successfully.
func (t *Task) Complete(workerID string) ([]Payload, error) {
	if err := t.holder(workerID, "complete"); err != nil {
		return nil, err
	}
	return []Payload{TaskCompleted{WorkerID: workerID}}, nil
}

// Fail ends the task as failed. workerID is the holder for a worker's own
// failure, "" for the system (stuck detector, timeouts).
func (t *Task) Fail(workerID, kind, reason string, evidence json.RawMessage) ([]Payload, error) {
	if workerID != "" {
		if err := t.holder(workerID, "fail"); err != nil {
			return nil, err
		}
	} else if t.Status != StatusInProgress {
		return nil, &TransitionError{Command: "fail", Status: t.Status}
	}
	switch kind {
	case FailureError, FailureWorkerOffline, FailureTimeout:
	default:
		return nil, Invalid("kind", "must be one of error, worker_offline, timeout")
	}
	if strings.TrimSpace(reason) == "" {
		reason = "no reason given"
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	holder := workerID
	if holder == "" && t.AssignedTo != nil {
		holder = *t.AssignedTo
	}
	return []Payload{TaskFailed{WorkerID: holder, Kind: kind, Reason: reason, Evidence: evidence}}, nil
}

// Cancel stops a task that has not ended.
func (t *Task) Cancel(by, reason string) ([]Payload, error) {
	if t.Status.Terminal() {
		return nil, &TransitionError{Command: "cancel", Status: t.Status}
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{TaskCancelled{By: by, Reason: reason}}, nil
}

// Assign gives a pending task to a worker; it stays pending until claimed.
func (t *Task) Assign(workerID, by, reason string) ([]Payload, error) {
	if t.Status != StatusPending {
		return nil, &TransitionError{Command: "assign", Status: t.Status}
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{TaskAssigned{WorkerID: workerID, By: by, Reason: reason}}, nil
}

// TaskEdit holds the fields an admin may change; nil leaves a field as is.
type TaskEdit struct {
	Title       *string
	Description *string
	Params      json.RawMessage
	Priority    *Priority
	// RunAt moves the time the task becomes claimable (see NewTaskParams).
	RunAt *time.Time
}

// Edit changes a pending task. Params, when given, must already satisfy the
// type's schema.
func (t *Task) Edit(e TaskEdit) ([]Payload, error) {
	if t.Status != StatusPending {
		return nil, &TransitionError{Command: "edit", Status: t.Status}
	}
	out := TaskEdited{Title: t.Title, Description: t.Description, Params: t.Params, Priority: t.Priority}
	if e.Title != nil {
		out.Title = strings.TrimSpace(*e.Title)
		if out.Title == "" {
			return nil, Invalid("title", "must not be empty")
		}
		if utf8.RuneCountInString(out.Title) > MaxTitleLen {
			return nil, Invalid("title", "is longer than %d characters", MaxTitleLen)
		}
	}
	if e.Description != nil {
		if len(*e.Description) > MaxDescriptionLen {
			return nil, Invalid("description", "is longer than %d characters", MaxDescriptionLen)
		}
		out.Description = *e.Description
	}
	if e.Params != nil {
		params, err := objectParams(e.Params)
		if err != nil {
			return nil, err
		}
		out.Params = params
	}
	if e.Priority != nil {
		if e.Priority.Rank() < 0 {
			return nil, Invalid("priority", "must be one of urgent, high, medium, low")
		}
		out.Priority = *e.Priority
	}
	if e.RunAt != nil {
		if err := checkTime("run_at", *e.RunAt); err != nil {
			return nil, err
		}
		at := e.RunAt.UTC()
		out.AvailableAt = &at
	}
	return []Payload{out}, nil
}

// RetryDecision is what may follow a failure; only one ever does.
func (t *Task) canDecideRetry(command string) error {
	if t.Status != StatusFailed {
		return &TransitionError{Command: command, Status: t.Status}
	}
	if t.RetryOutcome != nil && *t.RetryOutcome == RetryOutcomeRetried {
		return &TransitionError{Command: command, Status: "already retried"}
	}
	return nil
}

// Retried records the retry created for a failed task. A manual retry by an
// admin is allowed after the automatic decision skipped or exhausted.
func (t *Task) Retried(p TaskRetried) ([]Payload, error) {
	if err := t.canDecideRetry("retry"); err != nil {
		return nil, err
	}
	if !p.Manual && t.RetryOutcome != nil {
		return nil, &TransitionError{Command: "retry", Status: Status("retry already decided: " + *t.RetryOutcome)}
	}
	return []Payload{p}, nil
}

// RetrySkipped records that the failure looked permanent.
func (t *Task) RetrySkipped(reason string) ([]Payload, error) {
	if err := t.canDecideRetry("skip retry of"); err != nil {
		return nil, err
	}
	if t.RetryOutcome != nil {
		return nil, &TransitionError{Command: "skip retry of", Status: Status("retry already decided: " + *t.RetryOutcome)}
	}
	return []Payload{TaskRetrySkipped{Reason: reason}}, nil
}

// RetriesExhausted records that the type allows no more attempts.
func (t *Task) RetriesExhausted(maxRetries int) ([]Payload, error) {
	if err := t.canDecideRetry("exhaust retries of"); err != nil {
		return nil, err
	}
	if t.RetryOutcome != nil {
		return nil, &TransitionError{Command: "exhaust retries of", Status: Status("retry already decided: " + *t.RetryOutcome)}
	}
	return []Payload{TaskRetriesExhausted{Attempts: t.RetryCount + 1, MaxRetries: maxRetries}}, nil
}

func maxLen(field, s string, n int) error {
	if TooLong(s, n) {
		return Invalid(field, "is longer than %d characters", n)
	}
	return nil
}
