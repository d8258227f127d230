package events

import (
	"encoding/json"
	"time"
)

// Task stream payloads. Field names are the stored JSON: never rename, add.

type TaskCreated struct {
	Title        string          `json:"title"`
	Description  string          `json:"description"`
	TaskTypeID   string          `json:"task_type_id"`
	Params       json.RawMessage `json:"params"`
	Priority     Priority        `json:"priority"`
	RetryCount   int             `json:"retry_count"`
	ParentTaskID string          `json:"parent_task_id,omitempty"`
	CreatedBy    string          `json:"created_by,omitempty"`
	AvailableAt  *time.Time      `json:"available_at,omitempty"`
	// ScheduleID and ScheduleRun: the schedule whose firing (execution
	// number ScheduleRun) created the task; retries carry them on.
	ScheduleID  string `json:"schedule_id,omitempty"`
	ScheduleRun int    `json:"schedule_run,omitempty"`
	// UniqueKey makes the task unique among its type's tasks that are
	// pending or in progress; retries carry it on. UniqueFor, when the
	// creator asked for a window, is how long after the last completed
	// task with the key no new one could be created (a Go duration).
	UniqueKey string `json:"unique_key,omitempty"`
	UniqueFor string `json:"unique_for,omitempty"`
	// DependsOn are the tasks this one waits for; Blocked says some were
	// not done when it was created, so it starts blocked, not pending.
	DependsOn           []string `json:"depends_on,omitempty"`
	OnDependencyFailure string   `json:"on_dependency_failure,omitempty"`
	Blocked             bool     `json:"blocked,omitempty"`
	// WorkflowID and Ref: the workflow that created the task and its name
	// there; retries carry them on.
	WorkflowID string `json:"workflow_id,omitempty"`
	Ref        string `json:"ref,omitempty"`
}

// TaskAssigned: an admin (or the creator) gave the task to a worker; it stays
// pending until that worker claims it.
type TaskAssigned struct {
	WorkerID string `json:"worker_id"`
	By       string `json:"by"`
	Reason   string `json:"reason,omitempty"`
}

type TaskClaimed struct {
	WorkerID string `json:"worker_id"`
	// TaskTypeID is set on the claim of a task of a paused or limited type:
	// the type's rate window is counted from these events (DESIGN §13).
	TaskTypeID string `json:"task_type_id,omitempty"`
}

// TaskReleased: the holder gave the task back to the pool.
type TaskReleased struct {
	WorkerID string `json:"worker_id"`
	Reason   string `json:"reason,omitempty"`
}

type TaskUpdatePosted struct {
	UpdateID string `json:"update_id"`
	AuthorID string `json:"author_id,omitempty"`
	Message  string `json:"message"`
}

type TaskResultPosted struct {
	WorkerID string          `json:"worker_id"`
	Result   json.RawMessage `json:"result"`
}

type TaskCompleted struct {
	WorkerID string `json:"worker_id"`
}

// Failure kinds.
const (
	FailureError         = "error"
	FailureWorkerOffline = "worker_offline"
	FailureTimeout       = "timeout"
)

// TaskFailed says why: its kind and, for automatic decisions, the evidence.
type TaskFailed struct {
	WorkerID string          `json:"worker_id,omitempty"`
	Kind     string          `json:"kind"`
	Reason   string          `json:"reason"`
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

type TaskCancelled struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	// DependencyID: the dependency whose chain ended without completing
	// (Reason is ReasonDependencyFailed).
	DependencyID string `json:"dependency_id,omitempty"`
}

// TaskUnblocked: a blocked task became pending, because the completion of
// DependencyID was the last one it waited for, or because an admin (By)
// released it.
type TaskUnblocked struct {
	DependencyID string `json:"dependency_id,omitempty"`
	By           string `json:"by,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// TaskRetried is appended to the failed task when its retry exists.
type TaskRetried struct {
	RetryTaskID string `json:"retry_task_id"`
	RetryNumber int    `json:"retry_number"`
	MaxRetries  int    `json:"max_retries"`
	Hint        string `json:"hint,omitempty"`
	Manual      bool   `json:"manual,omitempty"`
}

type TaskRetrySkipped struct {
	Reason string `json:"reason"`
}

type TaskRetriesExhausted struct {
	Attempts   int `json:"attempts"`
	MaxRetries int `json:"max_retries"`
}

// TaskEdited carries the full editable fields after the edit. AvailableAt
// is there only when the edit moved the task's run_at.
type TaskEdited struct {
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Params      json.RawMessage `json:"params"`
	Priority    Priority        `json:"priority"`
	AvailableAt *time.Time      `json:"available_at,omitempty"`
}

// TaskDue: the run_at of a scheduled task came, and it is claimable now.
type TaskDue struct {
	RunAt time.Time `json:"run_at"`
}

func (TaskCreated) EventType() string          { return "task.created" }
func (TaskAssigned) EventType() string         { return "task.assigned" }
func (TaskClaimed) EventType() string          { return "task.claimed" }
func (TaskReleased) EventType() string         { return "task.released" }
func (TaskUpdatePosted) EventType() string     { return "task.update_posted" }
func (TaskResultPosted) EventType() string     { return "task.result_posted" }
func (TaskCompleted) EventType() string        { return "task.completed" }
func (TaskFailed) EventType() string           { return "task.failed" }
func (TaskCancelled) EventType() string        { return "task.cancelled" }
func (TaskRetried) EventType() string          { return "task.retried" }
func (TaskRetrySkipped) EventType() string     { return "task.retry_skipped" }
func (TaskRetriesExhausted) EventType() string { return "task.retries_exhausted" }
func (TaskEdited) EventType() string           { return "task.edited" }
func (TaskDue) EventType() string              { return "task.due" }
func (TaskUnblocked) EventType() string        { return "task.unblocked" }

func init() {
	register[TaskCreated]()
	register[TaskAssigned]()
	register[TaskClaimed]()
	register[TaskReleased]()
	register[TaskUpdatePosted]()
	register[TaskResultPosted]()
	register[TaskCompleted]()
	register[TaskFailed]()
	register[TaskCancelled]()
	register[TaskRetried]()
	register[TaskRetrySkipped]()
	register[TaskRetriesExhausted]()
	register[TaskEdited]()
	register[TaskDue]()
	register[TaskUnblocked]()
}
