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

// TaskTypePaused: claims skip the type's tasks until it is resumed; they
// stay pending and visible. By is the actor's id (a user, or a part of the
// system such as a budget), Reason free text.
type TaskTypePaused struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// TaskTypeResumed: the type's tasks are claimable again.
type TaskTypeResumed struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

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
	TypeLimits
	// Alias is the short name people type for the type (/add reddit
	// NVDA); at most one type has it.
	Alias string `json:"alias,omitempty" openapi:"maxLength=32"`
	// ParamsTemplate is the params of a task made from a key (/add), as
	// written: a JSON object with {{key}} and {{name}} placeholders inside
	// its strings (store/paramtemplate).
	ParamsTemplate json.RawMessage `json:"params_template,omitempty"`
	TypeBudgets
}

// TypeBudgets cap a type's LLM usage per team day (DIGEST_TZ); reaching
// one pauses the type until the day turns. nil: no budget.
type TypeBudgets struct {
	DailyTokenBudget   *int64   `json:"daily_token_budget,omitempty"`
	DailyCostBudgetUSD *float64 `json:"daily_cost_budget_usd,omitempty"`
}

// TypeLimits bound how the fleet claims a type's tasks (DESIGN §13); the
// zero value bounds nothing.
type TypeLimits struct {
	// MaxInProgress is the most tasks of the type in progress at once.
	MaxInProgress *int `json:"max_in_progress,omitempty"`
	// RateLimit is the most claims of the type in any sliding window.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// ConcurrencyKey is a JSON path into params ($.ticker); tasks with
	// the same value there share MaxInProgressPerKey.
	ConcurrencyKey      string `json:"concurrency_key,omitempty"`
	MaxInProgressPerKey *int   `json:"max_in_progress_per_key,omitempty"`
}

// RateLimit is Count claims per window of Per (a duration such as "1m").
type RateLimit struct {
	Count int    `json:"count" openapi:"required,min=1,max=100000"`
	Per   string `json:"per" openapi:"required,duration=1s..24h,wholeSeconds,pattern=^([0-9]+(\\.[0-9]+)?(h|m|s))+$" doc:"the window: a whole number of seconds from 1s to 24h, such as 30s, 1m or 1h"`
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
func (TaskTypePaused) EventType() string    { return "task_type.paused" }
func (TaskTypeResumed) EventType() string   { return "task_type.resumed" }
func (UserRegistered) EventType() string    { return "user.registered" }
func (WorkerWentOnline) EventType() string  { return "worker.went_online" }
func (WorkerWentOffline) EventType() string { return "worker.went_offline" }

func init() {
	register[TaskTypeCreated]()
	register[TaskTypeUpdated]()
	register[TaskTypeArchived]()
	register[TaskTypePaused]()
	register[TaskTypeResumed]()
	register[UserRegistered]()
	register[WorkerWentOnline]()
	register[WorkerWentOffline]()
}
