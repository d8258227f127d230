package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/paramtemplate"
)

type createWorkerRequest struct {
	Email              string `json:"email" openapi:"required,format=email,maxLength=254"`
	Password           string `json:"password" openapi:"required,minLength=8,maxLength=72"`
	FullName           string `json:"full_name" openapi:"required,nonblank,maxLength=200"`
	MaxConcurrentTasks *int   `json:"max_concurrent_tasks,omitempty" openapi:"min=1,max=100" doc:"tasks it may hold at once (default 1)"`
	IsAdmin            bool   `json:"is_admin,omitempty" doc:"an admin too"`
	IsWorker           *bool  `json:"is_worker,omitempty" doc:"a worker (default true); false with is_admin true makes an admin-only account"`
}

func (s *Server) createWorker(c echo.Context) error {
	var req createWorkerRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	u, err := s.CreateWorker(c.Request().Context(), req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, u)
}

// accountRoles are the role query's values: which accounts a listing shows.
var accountRoles = map[string]store.AccountRole{"": store.RoleWorker, "worker": store.RoleWorker, "admin": store.RoleAdmin, "any": store.RoleAny}

func (s *Server) listWorkers(c echo.Context) error {
	role, known := accountRoles[c.QueryParam("role")]
	if !known {
		return events.Invalid("role", "must be worker, admin or any")
	}
	limit, err := intQueryParam(c, "limit", 1, store.MaxAccountPage, 50)
	if err != nil {
		return err
	}
	page, err := s.db.ListAccountsPage(c.Request().Context(), store.AccountFilter{Role: role, After: c.QueryParam("after"), Limit: limit})
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, page)
}

func (s *Server) capacity(c echo.Context) error {
	limit, err := intQueryParam(c, "limit", 1, store.MaxAccountPage, 50)
	if err != nil {
		return err
	}
	cp, err := s.db.Capacity(c.Request().Context(), store.AccountFilter{After: c.QueryParam("after"), Limit: limit})
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, cp)
}

func (s *Server) stats(c echo.Context) error {
	st, err := s.db.Stats(c.Request().Context())
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, st)
}

type taskTypeRequest struct {
	Name                string            `json:"name" openapi:"required,maxLength=63,pattern=^[a-z][a-z0-9_]*$" doc:"lower_snake_case, starting with a letter; cannot change"`
	Label               string            `json:"label,omitempty" openapi:"maxLength=200" doc:"display name (default: the name)"`
	Description         string            `json:"description,omitempty" openapi:"maxLength=10000"`
	SOP                 string            `json:"sop,omitempty" openapi:"maxLength=200000" doc:"the standard operating procedure a worker follows"`
	ParamSchema         json.RawMessage   `json:"param_schema,omitempty" doc:"a JSON Schema (draft 2020-12) object that every task's params must satisfy (default: any object)"`
	MaxRetries          *int              `json:"max_retries,omitempty" openapi:"min=0,max=20" doc:"automatic retries after a failure (default 3)"`
	TimeoutSeconds      int               `json:"timeout_seconds,omitempty" openapi:"min=0,max=604800" doc:"a task in progress longer than this fails with kind timeout (0: no limit)"`
	RetryBackoffSeconds int               `json:"retry_backoff_seconds,omitempty" openapi:"min=0,max=3600" doc:"a retry becomes claimable this long after the failure"`
	MaxInProgress       *int              `json:"max_in_progress,omitempty" openapi:"min=1,max=100000" doc:"the most tasks of the type in progress across the fleet at once (leave out: no limit)"`
	RateLimit           *events.RateLimit `json:"rate_limit,omitempty" doc:"the most claims of the type in any sliding window: {count, per} with per a duration such as 1m"`
	ConcurrencyKey      string            `json:"concurrency_key,omitempty" openapi:"maxLength=200,pattern=^\\s*(\\$(\\.[A-Za-z_][A-Za-z0-9_]*|\\[\"[^\"\\\\\\x00]+\"\\]|\\[[0-9]{1,18}\\]){1,16})?\\s*$" doc:"a JSON path into params, such as $.ticker: tasks with the same value there share max_in_progress_per_key"`
	MaxInProgressPerKey *int              `json:"max_in_progress_per_key,omitempty" openapi:"min=1,max=100000" doc:"with concurrency_key: the most tasks of one key in progress at once"`
	Alias               string            `json:"alias,omitempty" openapi:"maxLength=32,pattern=^\\s*([A-Za-z][A-Za-z0-9_-]*)?\\s*$" doc:"a short unique name people type, as in the Telegram command /add reddit NVDA: lower case letters, digits, '_' and '-'"`
	ParamsTemplate      json.RawMessage   `json:"params_template,omitempty" doc:"the params of a task made from a key (/add reddit NVDA): a JSON object with {{key}} (the bare word) and {{name}} (name=value) placeholders inside its strings, such as {\"ticker\": \"{{key}}\"}"`
	DailyTokenBudget    *int64            `json:"daily_token_budget,omitempty" openapi:"min=1,max=1000000000000" doc:"LLM tokens (all four kinds) the type may use per team day (DIGEST_TZ); reaching it pauses the type until the day turns (leave out: no budget)"`
	DailyCostBudgetUSD  *float64          `json:"daily_cost_budget_usd,omitempty" openapi:"min=0.01,max=1000000" doc:"LLM cost in US dollars (at least 0.01) the type may use per team day; reaching it pauses the type until the day turns (leave out: no budget)"`
}

// spec validates the request into a spec whose schema compiles.
func (r taskTypeRequest) spec() (events.TaskTypeSpec, error) {
	spec := events.TaskTypeSpec{
		Name: r.Name, Label: r.Label, Description: r.Description, SOP: r.SOP, ParamSchema: r.ParamSchema,
		MaxRetries: events.DefaultMaxRetries, TimeoutSeconds: r.TimeoutSeconds, RetryBackoffSeconds: r.RetryBackoffSeconds,
		TypeLimits: events.TypeLimits{MaxInProgress: r.MaxInProgress, RateLimit: r.RateLimit, ConcurrencyKey: r.ConcurrencyKey,
			MaxInProgressPerKey: r.MaxInProgressPerKey},
		Alias: r.Alias, ParamsTemplate: r.ParamsTemplate,
		TypeBudgets: events.TypeBudgets{DailyTokenBudget: r.DailyTokenBudget, DailyCostBudgetUSD: r.DailyCostBudgetUSD},
	}
	if r.MaxRetries != nil {
		spec.MaxRetries = *r.MaxRetries
	}
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	if spec.ParamsTemplate != nil {
		if _, err := paramtemplate.Parse(string(spec.ParamsTemplate)); err != nil {
			return spec, events.Invalid("params_template", "%v", err)
		}
	}
	_, err := compileSchema(spec.ParamSchema)
	return spec, err
}

func (s *Server) createTaskType(c echo.Context) error {
	var req taskTypeRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	tt, err := s.CreateTaskType(c.Request().Context(), req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, tt)
}

func (s *Server) listTaskTypes(c echo.Context) error {
	archived, err := boolQuery(c, "archived")
	if err != nil {
		return err
	}
	tts, err := s.db.ListTaskTypes(c.Request().Context(), archived)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tts)
}

func (s *Server) getTaskType(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	tt, err := s.db.GetTaskType(c.Request().Context(), s.db.Pool(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tt)
}

func (s *Server) updateTaskType(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req taskTypeRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	tt, err := s.UpdateTaskType(c.Request().Context(), id, req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tt)
}

func (s *Server) archiveTaskType(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	tt, err := s.ArchiveTaskType(c.Request().Context(), id, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tt)
}

func (s *Server) taskTypeUsage(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	u, err := s.db.TypeUsage(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, u)
}

type pauseRequest struct {
	Reason string `json:"reason" openapi:"required,maxLength=10000" doc:"why: shown on the type, the dashboard and in Telegram"`
}

func (s *Server) pauseTaskType(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req pauseRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	tt, err := s.PauseTaskType(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tt)
}

func (s *Server) resumeTaskType(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	tt, err := s.ResumeTaskType(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tt)
}

type createTaskRequest struct {
	Title       string          `json:"title" openapi:"required,nonblank,maxLength=500"`
	Description string          `json:"description,omitempty" openapi:"maxLength=100000"`
	TaskTypeID  string          `json:"task_type_id" openapi:"required,format=uuid"`
	Params      json.RawMessage `json:"params,omitempty" doc:"a JSON object that satisfies the type's param_schema"`
	Priority    events.Priority `json:"priority,omitempty" doc:"default medium"`
	AssignedTo  *string         `json:"assigned_to,omitempty" openapi:"format=uuid" doc:"a worker to assign the task to at once"`
	Reason      string          `json:"reason,omitempty" openapi:"maxLength=10000" doc:"why it is assigned"`
	UniqueKey   string          `json:"unique_key,omitempty" openapi:"maxLength=200,nonblankOrEmpty" doc:"no other task of the type with this key may be pending or in progress (409 duplicate_task)"`
	UniqueFor   string          `json:"unique_for,omitempty" openapi:"duration=0s..8784h,maxLength=100" doc:"with unique_key: also refuse the key for this long after the last completed task with it, as a duration such as 6h or 90m"`
	OnDuplicate string          `json:"on_duplicate,omitempty" openapi:"enum=error|existing" doc:"what a duplicate gets: error (409 duplicate_task, the default) or existing (200 and the task that holds the key)"`
	RunAt       *string         `json:"run_at,omitempty" openapi:"format=date-time" doc:"RFC 3339, years 1970-9999: the task stays pending and is not claimable before then (scheduled)"`
	DependsOn   []string        `json:"depends_on,omitempty" openapi:"maxItems=100,uniqueItems,itemFormat=uuid" doc:"task ids this task waits for: it stays blocked (not claimable) until each one's retry chain completed"`
	// OnDependencyFailure says what the end of a dependency's chain
	// without completing does to the task.
	OnDependencyFailure string `json:"on_dependency_failure,omitempty" openapi:"enum=cancel|wait" doc:"cancel (the default): the task is cancelled with reason dependency_failed; wait: it stays blocked for an admin to retry the dependency or release the task"`
}

// On a duplicate unique key, a creation answers an error or the task that
// holds the key.
const (
	onDuplicateError    = "error"
	onDuplicateExisting = "existing"
)

// uniqueFor parses the unique key's window; none when empty.
func (r createTaskRequest) uniqueFor() (time.Duration, error) {
	if r.UniqueFor == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(r.UniqueFor)
	if err != nil || d < 0 {
		return 0, events.Invalid("unique_for", "must be a duration such as 6h, 90m or 1h30m")
	}
	return d, nil
}

func (s *Server) createTask(c echo.Context) error {
	var req createTaskRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	types := typeCache{}
	t, created, err := s.createTaskOf(c.Request().Context(), req, actor(c, events.ActorAdmin), types)
	if err != nil {
		return err
	}
	answer := taskAnswer(*t, types[t.TaskTypeID])
	if !created {
		return ok(c, http.StatusOK, answer)
	}
	return ok(c, http.StatusCreated, answer)
}

// TaskTypeRef is the type a task answer carries, so a client reads the task
// without asking for its type.
type TaskTypeRef struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Label      string `json:"label"`
	MaxRetries int    `json:"max_retries"`
}

// TaskAnswer is a task as create and list answer it: with its type and the
// automatic retries it gets.
type TaskAnswer struct {
	events.Task
	MaxRetries int          `json:"max_retries" doc:"automatic retries after a failure (the type's max_retries)"`
	TaskType   *TaskTypeRef `json:"task_type"`
}

// TaskListPage is one page of the task list, newest first.
type TaskListPage struct {
	Tasks      []TaskAnswer `json:"tasks"`
	NextCursor string       `json:"next_cursor,omitempty"`
	QueueDepth int          `json:"queue_depth"`
}

func taskAnswer(t events.Task, tt *events.TaskType) TaskAnswer {
	a := TaskAnswer{Task: t}
	if tt != nil {
		a.MaxRetries = tt.MaxRetries
		a.TaskType = &TaskTypeRef{ID: tt.ID, Name: tt.Name, Label: tt.Label, MaxRetries: tt.MaxRetries}
	}
	return a
}

func (s *Server) listTasks(c echo.Context) error {
	p := TaskFilterParams{Status: c.QueryParam("status"), TaskTypeID: c.QueryParam("task_type_id"),
		Priority: c.QueryParam("priority"), AssignedTo: c.QueryParam("assigned_to"), Q: c.QueryParam("q")}
	var err error
	if p.Unassigned, err = boolQuery(c, "unassigned"); err != nil {
		return err
	}
	if p.Retries, err = boolQuery(c, "retries"); err != nil {
		return err
	}
	if p.Stuck, err = boolQuery(c, "stuck"); err != nil {
		return err
	}
	f, err := p.filter("")
	if err != nil {
		return err
	}
	f.After = c.QueryParam("after")
	if v := c.QueryParam("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > 200 {
			return events.Invalid("limit", "must be a number from 1 to 200")
		}
	}
	ctx := c.Request().Context()
	page, err := s.db.ListTasks(ctx, f)
	if err != nil {
		return err
	}
	out := TaskListPage{Tasks: make([]TaskAnswer, 0, len(page.Tasks)), NextCursor: page.NextCursor, QueueDepth: page.QueueDepth}
	types := typeCache{}
	for _, t := range page.Tasks {
		tt, seen := types[t.TaskTypeID]
		if !seen {
			if tt, err = s.db.GetTaskType(ctx, s.db.Pool(), t.TaskTypeID); err != nil {
				return err
			}
			types[t.TaskTypeID] = tt
		}
		out.Tasks = append(out.Tasks, taskAnswer(t, tt))
	}
	return ok(c, http.StatusOK, out)
}

func (s *Server) getTask(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if c.QueryParam("at") != "" {
		return s.taskAt(c, id)
	}
	d, err := s.db.GetTaskDetail(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, d)
}

type editTaskRequest struct {
	Title       *string          `json:"title,omitempty" openapi:"maxLength=500"`
	Description *string          `json:"description,omitempty" openapi:"maxLength=100000"`
	Params      json.RawMessage  `json:"params,omitempty" doc:"a JSON object that satisfies the type's param_schema"`
	Priority    *events.Priority `json:"priority,omitempty"`
	RunAt       *string          `json:"run_at,omitempty" openapi:"format=date-time" doc:"RFC 3339, years 1970-9999: moves when the pending task becomes claimable"`
}

func (s *Server) editTask(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req editTaskRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	t, err := s.EditTask(c.Request().Context(), id, req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

func (s *Server) cancelTask(c echo.Context) error {
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	t, err := s.CancelTask(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

func (s *Server) releaseTask(c echo.Context) error {
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	t, err := s.db.ReleaseBlocked(c.Request().Context(), s.db.Pool(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

type assignRequest struct {
	AssignedTo string `json:"assigned_to" openapi:"required,format=uuid"`
	Reason     string `json:"reason" openapi:"maxLength=10000"`
}

func (s *Server) assignTask(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req assignRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	ctx := c.Request().Context()
	t, err := s.AssignTask(ctx, id, req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	history, err := s.db.TaskAssignments(ctx, id)
	if err != nil {
		return err
	}
	answer := AssignAnswer{Task: t}
	for i := range history {
		if history[i].Version == t.Version {
			answer.Assignment = &history[i]
		}
	}
	return ok(c, http.StatusOK, answer)
}

// AssignAnswer is what an assignment answers: the task and the assignment
// it recorded.
type AssignAnswer struct {
	Task       *events.Task      `json:"task"`
	Assignment *store.Assignment `json:"assignment"`
}

// taskAssignments answers a task's assignment history, oldest first.
func (s *Server) taskAssignments(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := s.db.GetTask(ctx, s.db.Pool(), id); err != nil {
		return err
	}
	history, err := s.db.TaskAssignments(ctx, id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, history)
}
