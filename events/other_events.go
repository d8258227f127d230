package events

import "encoding/json"

// Task type stream payloads.

// TaskTypeCreated and TaskTypeUpdated carry the whole definition.
type TaskTypeCreated struct {
	TaskTypeSpec
}

type TaskTypeUpdated struct {
	TaskTypeSpec
}

type TaskTypeArchived struct{}

// TaskTypeSpec is what an admin defines for a type of work.
type TaskTypeSpec struct {
	Name                string          `json:"name"`
	Label               string          `json:"label"`
	Description         string          `json:"description"`
	SOP                 string          `json:"sop"`
	ParamSchema         json.RawMessage `json:"param_schema"`
	MaxRetries          int             `json:"max_retries"`
	TimeoutSeconds      int             `json:"timeout_seconds,omitempty"`
	RetryBackoffSeconds int             `json:"retry_backoff_seconds,omitempty"`
}

// User stream payloads. Passwords never enter the log (ADR 002).

type UserRegistered struct {
	Email              string `json:"email"`
	FullName           string `json:"full_name"`
	IsAdmin            bool   `json:"is_admin"`
	IsWorker           bool   `json:"is_worker"`
	MaxConcurrentTasks int    `json:"max_concurrent_tasks"`
}

// WorkerWentOnline: a heartbeat arrived from a worker marked offline.
type WorkerWentOnline struct {
	LastSeenBefore string `json:"last_seen_before,omitempty"`
}

// WorkerWentOffline carries the evidence: the last heartbeat and the rule.
type WorkerWentOffline struct {
	LastHeartbeat    string `json:"last_heartbeat"`
	ThresholdSeconds int    `json:"threshold_seconds"`
	InProgress       int    `json:"in_progress"`
	// Rule says which rule fired; empty (older events) is OfflineSilent.
	Rule string `json:"rule,omitempty"`
	// LastClaim is, for a worker never heard from, when it last claimed.
	LastClaim string `json:"last_claim,omitempty"`
}

// Rules that take a worker offline.
const (
	OfflineSilent          = "silent"            // no heartbeat for the threshold
	OfflineNeverHeard      = "never_heard"       // held tasks, never sent a heartbeat, silent since its last claim
	OfflineHeartbeatSaidSo = "heartbeat_offline" // its last heartbeat said status offline
)

func (TaskTypeCreated) EventType() string   { return "task_type.created" }
func (TaskTypeUpdated) EventType() string   { return "task_type.updated" }
func (TaskTypeArchived) EventType() string  { return "task_type.archived" }
func (UserRegistered) EventType() string    { return "user.registered" }
func (WorkerWentOnline) EventType() string  { return "worker.went_online" }
func (WorkerWentOffline) EventType() string { return "worker.went_offline" }

func init() {
	register[TaskTypeCreated]()
	register[TaskTypeUpdated]()
	register[TaskTypeArchived]()
	register[UserRegistered]()
	register[WorkerWentOnline]()
	register[WorkerWentOffline]()
}
