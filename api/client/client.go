// Package client is the typed Go client of the task-service API, used by
// taskctl, task-worker and the tests. It speaks only HTTP and shares the
// domain types of package events and the read models of package store.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Error is an error envelope from the API.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Details carry what a client acts on: existing_task_id for
	// duplicate_task.
	Details map[string]string `json:"details,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" && !strings.HasPrefix(e.Message, e.Field) {
		return fmt.Sprintf("%d %s: %s: %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// IsStatus reports whether err is an API error with that HTTP status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// Client talks to one task-service.
type Client struct {
	base string
	http *http.Client
	mu   sync.RWMutex
	tok  string
}

// New returns a client for base (e.g. http://127.0.0.1:8001). A nil
// httpClient uses one with a 90 s timeout (long enough for long-poll
// claims) whose uploads wait up to 5 s for the server's 100 Continue
// (UploadData): Go's default, 1 s, lets a loaded server's 413 race the body.
func New(base string, httpClient *http.Client) *Client {
	if httpClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ExpectContinueTimeout = 5 * time.Second
		httpClient = &http.Client{Timeout: 90 * time.Second, Transport: t}
	}
	return &Client{base: strings.TrimRight(base, "/"), http: httpClient}
}

// Base is the API address.
func (c *Client) Base() string { return c.base }

// SetToken sets the bearer token used from now on.
func (c *Client) SetToken(tok string) {
	c.mu.Lock()
	c.tok = tok
	c.mu.Unlock()
}

// Token is the current bearer token.
func (c *Client) Token() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.tok
}

// Do sends a request with an optional JSON body and decodes the envelope's
// data into out (when non-nil). Exported for routes without a typed method.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	_, err := c.DoStatus(ctx, method, path, body, out)
	return err
}

// DoStatus is Do that also returns the HTTP status of a success (201
// Created, or 200 for a creation that found its task already there).
func (c *Client) DoStatus(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := c.Token(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if key := IdempotencyKey(ctx); key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	// One pass: data decodes straight into out (json fills the value an
	// interface's non-nil pointer points to); an error response has none.
	env := struct {
		Success bool   `json:"success"`
		Data    any    `json:"data"`
		Error   *Error `json:"error"`
	}{Data: out}
	if err := json.Unmarshal(raw, &env); err != nil {
		if resp.StatusCode < 400 {
			var probe struct{ Success bool }
			if json.Unmarshal(raw, &probe) == nil {
				return 0, fmt.Errorf("%s %s: decode data: %w", method, path, err)
			}
		}
		return 0, fmt.Errorf("%s %s: %d, not an API envelope: %.200s", method, path, resp.StatusCode, raw)
	}
	if !env.Success || resp.StatusCode >= 400 {
		e := env.Error
		if e == nil {
			e = &Error{Code: "unknown", Message: http.StatusText(resp.StatusCode)}
		}
		e.Status = resp.StatusCode
		return 0, e
	}
	return resp.StatusCode, nil
}

// Login authenticates and keeps the token.
func (c *Client) Login(ctx context.Context, email, password string) (*LoginResponse, error) {
	var out LoginResponse
	err := c.Do(ctx, http.MethodPost, "/api/v1/auth/login", map[string]string{"email": email, "password": password}, &out)
	if err != nil {
		return nil, err
	}
	c.SetToken(out.Token)
	return &out, nil
}

// LoginResponse is what login returns.
type LoginResponse struct {
	Token     string       `json:"token"`
	ExpiresAt time.Time    `json:"expires_at"`
	User      *events.User `json:"user"`
}

// Heartbeat is a worker's heartbeat.
type Heartbeat struct {
	Status        string         `json:"status,omitempty"`
	CurrentTaskID string         `json:"current_task_id,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
}

// Heartbeat reports that the worker is alive.
func (c *Client) Heartbeat(ctx context.Context, hb Heartbeat) error {
	return c.Do(ctx, http.MethodPost, "/api/v1/worker/heartbeat", hb, nil)
}

// Claim takes the next task; nil when none is claimable.
func (c *Client) Claim(ctx context.Context) (*store.TaskWithType, error) {
	return c.claim(ctx, "/api/v1/worker/tasks/claim")
}

func (c *Client) claim(ctx context.Context, path string) (*store.TaskWithType, error) {
	var out *store.TaskWithType
	if err := c.Do(ctx, http.MethodPost, path, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimMany claims up to max tasks (1 to 100, at most the worker's free
// slots) in claim order; with wait > 0 it waits up to that long (whole
// seconds, at most a minute) for at least one. Empty when none came.
func (c *Client) ClaimMany(ctx context.Context, max int, wait time.Duration) ([]*store.TaskWithType, error) {
	body := map[string]int{"max": max}
	if wait > 0 {
		body["wait"] = int(wait / time.Second)
	}
	var out []*store.TaskWithType
	if err := c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/claims", body, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Finish is one task to report finished through FinishMany.
type Finish struct {
	ID     string          `json:"id"`
	Status events.Status   `json:"status"` // events.StatusCompleted or events.StatusFailed
	Result json.RawMessage `json:"result,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Kind   string          `json:"kind,omitempty"` // failed only: error (default) or timeout
	// Usage is the attempt's LLM usage, reported before the task finishes.
	Usage *events.UsageReport `json:"usage,omitempty"`
}

// FinishResult is one item's answer: Success, or the Error (and HTTP
// Status) the single call would have returned.
type FinishResult struct {
	ID      string `json:"id"`
	Status  int    `json:"status"`
	Success bool   `json:"success"`
	Error   *Error `json:"error,omitempty"`
}

// Err is the item's error, nil when it succeeded.
func (r FinishResult) Err() error {
	if r.Success {
		return nil
	}
	e := &Error{Status: r.Status, Code: "unknown"}
	if r.Error != nil {
		*e = *r.Error
		e.Status = r.Status
	}
	return e
}

// FinishMany completes or fails up to 100 held tasks in one request. Each
// item is answered on its own, in order; an error return means the whole
// request was refused (a malformed item, a task not held by this worker)
// and nothing changed.
func (c *Client) FinishMany(ctx context.Context, items []Finish) ([]FinishResult, error) {
	var out []FinishResult
	if err := c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/completions", items, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// MyTasks lists the worker's tasks (active only unless all).
func (c *Client) MyTasks(ctx context.Context, all bool) ([]events.Task, error) {
	var out []events.Task
	path := "/api/v1/worker/tasks"
	if all {
		path += "?all=true"
	}
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// MyTask reads one of the worker's tasks.
func (c *Client) MyTask(ctx context.Context, id string) (*store.TaskWithType, error) {
	var out store.TaskWithType
	return &out, c.Do(ctx, http.MethodGet, "/api/v1/worker/tasks/"+url.PathEscape(id), nil, &out)
}

// PostUpdate adds a progress message.
func (c *Client) PostUpdate(ctx context.Context, id, message string) error {
	return c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/updates", map[string]string{"message": message}, nil)
}

// PostResult stores the task's result.
func (c *Client) PostResult(ctx context.Context, id string, result any) error {
	return c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/result", map[string]any{"result": result}, nil)
}

// Complete marks the task completed.
func (c *Client) Complete(ctx context.Context, id string) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPut, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/status", map[string]string{"status": "completed"}, &out)
}

// Fail marks the task failed with a reason.
func (c *Client) Fail(ctx context.Context, id, reason string) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPut, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/status", map[string]string{"status": "failed", "reason": reason}, &out)
}

// FailKind marks the task failed with a kind (events.FailureError or
// events.FailureTimeout; "" means error) and a reason.
func (c *Client) FailKind(ctx context.Context, id, kind, reason string) (*events.Task, error) {
	var out events.Task
	body := map[string]string{"status": "failed", "reason": reason}
	if kind != "" {
		body["kind"] = kind
	}
	return &out, c.Do(ctx, http.MethodPut, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/status", body, &out)
}

// Release gives the task back to the pool.
func (c *Client) Release(ctx context.Context, id, reason string) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/release", map[string]string{"reason": reason}, &out)
}

// Admin routes.

const adminBase = "/api/v1/admin/workers"

// NewWorker is a worker user to create.
type NewWorker struct {
	Email              string `json:"email"`
	Password           string `json:"password"`
	FullName           string `json:"full_name"`
	MaxConcurrentTasks int    `json:"max_concurrent_tasks,omitempty"`
	IsAdmin            bool   `json:"is_admin,omitempty"`
	// IsWorker false (with IsAdmin) makes an admin-only account; nil a worker.
	IsWorker *bool `json:"is_worker,omitempty"`
}

// CreateWorker creates a worker user.
func (c *Client) CreateWorker(ctx context.Context, w NewWorker) (*events.User, error) {
	var out events.User
	_, err := c.create(ctx, adminBase, w, &out)
	return &out, err
}

// Workers lists every worker with its activity, page after page.
func (c *Client) Workers(ctx context.Context) ([]store.WorkerView, error) {
	return c.Accounts(ctx, "worker")
}

// Accounts lists every account with role (worker, admin or any), page
// after page.
func (c *Client) Accounts(ctx context.Context, role string) ([]store.WorkerView, error) {
	out := []store.WorkerView{}
	q := AccountQuery{Role: role, Limit: store.MaxAccountPage}
	for {
		page, err := c.AccountsPage(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Workers...)
		if page.NextCursor == "" {
			return out, nil
		}
		q.After = page.NextCursor
	}
}

// AccountQuery picks a page of the account list; zero values take the
// server's defaults (workers, the first page, 50).
type AccountQuery struct {
	Role  string
	After string
	Limit int
}

// AccountsPage reads one page of the account list, by name.
func (c *Client) AccountsPage(ctx context.Context, q AccountQuery) (*store.AccountPage, error) {
	var out store.AccountPage
	return &out, c.Do(ctx, http.MethodGet, q.path(adminBase, true), nil, &out)
}

// path is base with q's page (and role, when withRole) as its query.
func (q AccountQuery) path(base string, withRole bool) string {
	v := url.Values{}
	if q.Role != "" && withRole {
		v.Set("role", q.Role)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	if len(v) == 0 {
		return base
	}
	return base + "?" + v.Encode()
}

// Capacity reads the fleet's capacity with one page of its workers (q's
// Role is ignored: always the workers).
func (c *Client) Capacity(ctx context.Context, q AccountQuery) (*store.Capacity, error) {
	var out store.Capacity
	return &out, c.Do(ctx, http.MethodGet, q.path(adminBase+"/capacity", false), nil, &out)
}

// Stats reads the dashboard summary. Decoded loosely so newer servers' extra
// fields pass through.
func (c *Client) Stats(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	return out, c.Do(ctx, http.MethodGet, adminBase+"/stats", nil, &out)
}

// NewTaskType is a task type to create or replace.
type NewTaskType struct {
	Name                string          `json:"name"`
	Label               string          `json:"label,omitempty"`
	Description         string          `json:"description,omitempty"`
	SOP                 string          `json:"sop,omitempty"`
	ParamSchema         json.RawMessage `json:"param_schema,omitempty"`
	MaxRetries          *int            `json:"max_retries,omitempty"`
	TimeoutSeconds      int             `json:"timeout_seconds,omitempty"`
	RetryBackoffSeconds int             `json:"retry_backoff_seconds,omitempty"`
	// Limits (DESIGN §13); nil or empty: none.
	MaxInProgress       *int              `json:"max_in_progress,omitempty"`
	RateLimit           *events.RateLimit `json:"rate_limit,omitempty"`
	ConcurrencyKey      string            `json:"concurrency_key,omitempty"`
	MaxInProgressPerKey *int              `json:"max_in_progress_per_key,omitempty"`
	// Alias and ParamsTemplate make the type's tasks from a key (/add).
	Alias          string          `json:"alias,omitempty"`
	ParamsTemplate json.RawMessage `json:"params_template,omitempty"`
	// Daily LLM budgets; nil: none.
	DailyTokenBudget   *int64   `json:"daily_token_budget,omitempty"`
	DailyCostBudgetUSD *float64 `json:"daily_cost_budget_usd,omitempty"`
}

// CreateTaskType defines a type of work.
func (c *Client) CreateTaskType(ctx context.Context, t NewTaskType) (*events.TaskType, error) {
	var out events.TaskType
	_, err := c.create(ctx, adminBase+"/task-types", t, &out)
	return &out, err
}

// UpdateTaskType replaces a type's definition.
func (c *Client) UpdateTaskType(ctx context.Context, id string, t NewTaskType) (*events.TaskType, error) {
	var out events.TaskType
	return &out, c.Do(ctx, http.MethodPut, adminBase+"/task-types/"+url.PathEscape(id), t, &out)
}

// TaskTypes lists task types.
func (c *Client) TaskTypes(ctx context.Context, includeArchived bool) ([]events.TaskType, error) {
	var out []events.TaskType
	path := adminBase + "/task-types"
	if includeArchived {
		path += "?archived=true"
	}
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// TaskType reads a task type.
func (c *Client) TaskType(ctx context.Context, id string) (*events.TaskType, error) {
	var out events.TaskType
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/task-types/"+url.PathEscape(id), nil, &out)
}

// TaskTypeUsage reads how much of a type's limits is in use now.
func (c *Client) TaskTypeUsage(ctx context.Context, id string) (*store.TypeUsage, error) {
	var out store.TypeUsage
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/task-types/"+url.PathEscape(id)+"/usage", nil, &out)
}

// PauseTaskType stops claims of a type's tasks, with a reason.
func (c *Client) PauseTaskType(ctx context.Context, id, reason string) (*events.TaskType, error) {
	var out events.TaskType
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/task-types/"+url.PathEscape(id)+"/pause", map[string]string{"reason": reason}, &out)
}

// ResumeTaskType lets claims take a paused type's tasks again.
func (c *Client) ResumeTaskType(ctx context.Context, id, reason string) (*events.TaskType, error) {
	var out events.TaskType
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/task-types/"+url.PathEscape(id)+"/resume", map[string]string{"reason": reason}, &out)
}

// NewTask is a task to create.
type NewTask struct {
	Title       string          `json:"title"`
	Description string          `json:"description,omitempty"`
	TaskTypeID  string          `json:"task_type_id"`
	Params      json.RawMessage `json:"params,omitempty"`
	Priority    events.Priority `json:"priority,omitempty"`
	AssignedTo  string          `json:"assigned_to,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	// UniqueKey: no other task of the type with this key may be pending or
	// in progress; UniqueFor (a duration such as "6h") also refuses it that
	// long after the last completed one. OnDuplicate "existing" answers the
	// task that holds the key instead of a 409 duplicate_task.
	UniqueKey   string `json:"unique_key,omitempty"`
	UniqueFor   string `json:"unique_for,omitempty"`
	OnDuplicate string `json:"on_duplicate,omitempty"`
	// RunAt (RFC 3339) keeps the task scheduled, not claimable, until then.
	RunAt string `json:"run_at,omitempty"`
	// DependsOn are task ids that must complete first (the task starts
	// blocked); OnDependencyFailure "wait" keeps it blocked, not
	// cancelled, when one's retry chain ends otherwise.
	DependsOn           []string `json:"depends_on,omitempty"`
	OnDependencyFailure string   `json:"on_dependency_failure,omitempty"`
}

// CreateTask creates a task. With OnDuplicate "existing" it may be the task
// that holds the unique key; CreateTaskOnce tells which.
func (c *Client) CreateTask(ctx context.Context, t NewTask) (*events.Task, error) {
	out, _, err := c.CreateTaskOnce(ctx, t)
	return out, err
}

// CreateTaskOnce creates a task and says whether it is new (created) or,
// with OnDuplicate "existing", the task that holds the unique key.
func (c *Client) CreateTaskOnce(ctx context.Context, t NewTask) (task *events.Task, created bool, err error) {
	var out events.Task
	status, err := c.create(ctx, adminBase+"/tasks", t, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// TaskQuery filters the task list; zero values do not filter.
type TaskQuery struct {
	Status     string
	TaskTypeID string
	Priority   string
	AssignedTo string
	Unassigned bool
	Retries    bool
	Stuck      bool
	Q          string // title contains, ignoring case
	After      string
	Limit      int
}

// Tasks lists one page of tasks.
func (c *Client) Tasks(ctx context.Context, q TaskQuery) (*store.TaskPage, error) {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("status", q.Status)
	set("task_type_id", q.TaskTypeID)
	set("priority", q.Priority)
	set("assigned_to", q.AssignedTo)
	set("after", q.After)
	if q.Unassigned {
		v.Set("unassigned", "true")
	}
	if q.Retries {
		v.Set("retries", "true")
	}
	if q.Stuck {
		v.Set("stuck", "true")
	}
	set("q", q.Q)
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	var out store.TaskPage
	path := adminBase + "/tasks"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	return &out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// Task reads a task with everything around it.
func (c *Client) Task(ctx context.Context, id string) (*store.TaskDetail, error) {
	var out store.TaskDetail
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/tasks/"+url.PathEscape(id), nil, &out)
}

// TaskEdit holds the fields to change; nil leaves a field as is.
type TaskEdit struct {
	Title       *string          `json:"title,omitempty"`
	Description *string          `json:"description,omitempty"`
	Params      json.RawMessage  `json:"params,omitempty"`
	Priority    *events.Priority `json:"priority,omitempty"`
	RunAt       *string          `json:"run_at,omitempty"`
}

// EditTask edits a pending task.
func (c *Client) EditTask(ctx context.Context, id string, e TaskEdit) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPut, adminBase+"/tasks/"+url.PathEscape(id), e, &out)
}

// CancelTask cancels a task.
func (c *Client) CancelTask(ctx context.Context, id, reason string) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/tasks/"+url.PathEscape(id)+"/cancel", map[string]string{"reason": reason}, &out)
}

// AssignTask assigns a pending task to a worker.
func (c *Client) AssignTask(ctx context.Context, id, workerID, reason string) (*events.Task, error) {
	a, err := c.Assign(ctx, id, workerID, reason)
	if err != nil {
		return nil, err
	}
	return a.Task, nil
}

// Assignment is what an assignment answers: the task and the assignment
// it recorded.
type Assignment struct {
	Task       *events.Task      `json:"task"`
	Assignment *store.Assignment `json:"assignment"`
}

// Assign assigns a pending task to a worker with a reason.
func (c *Client) Assign(ctx context.Context, id, workerID, reason string) (*Assignment, error) {
	var out Assignment
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/tasks/"+url.PathEscape(id)+"/assign",
		map[string]string{"assigned_to": workerID, "reason": reason}, &out)
}

// TaskAssignments is a task's assignment history, oldest first.
func (c *Client) TaskAssignments(ctx context.Context, id string) ([]store.Assignment, error) {
	var out []store.Assignment
	return out, c.Do(ctx, http.MethodGet, adminBase+"/tasks/"+url.PathEscape(id)+"/assignments", nil, &out)
}

// Event is one event as the API shows it.
type Event struct {
	Seq        int64           `json:"seq"`
	Position   string          `json:"position"`
	StreamType string          `json:"stream_type"`
	StreamID   string          `json:"stream_id"`
	Version    int             `json:"version"`
	Type       string          `json:"type"`
	Data       json.RawMessage `json:"data"`
	Meta       events.Meta     `json:"meta"`
	OccurredAt time.Time       `json:"occurred_at"`
	// Actor is who caused the event, with a display name for people.
	Actor         Actor  `json:"actor"`
	CausationSeq  int64  `json:"causation_seq,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	// Summary is one line for humans: "claimed by Genesis".
	Summary string `json:"summary"`
}

// TaskEvents reads a task's event stream.
func (c *Client) TaskEvents(ctx context.Context, id string) ([]Event, error) {
	var out []Event
	return out, c.Do(ctx, http.MethodGet, adminBase+"/tasks/"+url.PathEscape(id)+"/events", nil, &out)
}

// ClaimWait claims, waiting up to wait on the server for a task to become
// claimable (long-poll); nil when none came. Servers without long-poll
// answer at once.
func (c *Client) ClaimWait(ctx context.Context, wait time.Duration) (*store.TaskWithType, error) {
	return c.claim(ctx, fmt.Sprintf("/api/v1/worker/tasks/claim?wait=%d", int(wait.Seconds())))
}

// DigestPreview is today's daily digest as the Telegram chat gets it.
type DigestPreview struct {
	Day      string    `json:"day"`
	TimeZone string    `json:"time_zone"`
	DueAt    time.Time `json:"due_at"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Partial  bool      `json:"partial"`
	HTML     string    `json:"html"`
	Text     string    `json:"text"`
}

// PreviewDigest builds today's digest (so far, before its time).
func (c *Client) PreviewDigest(ctx context.Context) (*DigestPreview, error) {
	var out DigestPreview
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/digest", nil, &out)
}
