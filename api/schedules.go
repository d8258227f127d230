package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Schedules (issue 13): recurring work that creates tasks on its own. The
// commands below are called by the JSON handlers and by the admin UI.

// ScheduleRequest creates a schedule (its task is required), or edits one
// (ScheduleEdit): in an edit every field is optional and a field left out
// keeps its value (null clears it).
type ScheduleRequest struct {
	ScheduleFields
	Task *events.ScheduleTemplate `json:"task,omitempty"`
}

// ScheduleEdit is the body of an edit: a create's fields, each optional,
// its task's too: what an edit gives is merged into the schedule, which is
// then checked whole.
type ScheduleEdit struct {
	ScheduleFields
	Task *ScheduleTemplateEdit `json:"task,omitempty"`
}

// ScheduleFields are a schedule's own fields, the same in a create and an
// edit; only the task differs (an edit's task fields are all optional).
type ScheduleFields struct {
	Name string `json:"name,omitempty" openapi:"maxLength=200"`
	// Interval: every N minutes, hours or days; or Cron, a five-field
	// expression (or @daily, @hourly...) in TimeZone (IANA, default UTC).
	// Neither: a one-time schedule at StartAt.
	Interval *events.Interval `json:"interval,omitempty"`
	Cron     string           `json:"cron,omitempty" openapi:"format=cron,maxLength=200" doc:"five fields (minute hour day-of-month month day-of-week) or a descriptor (@daily, @hourly, @every 2h at least the shortest interval)"`
	TimeZone string           `json:"time_zone,omitempty" openapi:"format=time-zone,maxLength=100" doc:"an IANA time zone such as Europe/Berlin (default UTC)"`
	StartAt  *time.Time       `json:"start_at,omitempty"`
	EndAt    *time.Time       `json:"end_at,omitempty" openapi:"greater=start_at" doc:"after start_at"`
	MaxRuns  int              `json:"max_runs,omitempty" openapi:"min=0,max=1000000000"`
	// Overlap: skip (default) or allow a firing while the previous
	// execution's retry chain has not ended.
	Overlap string `json:"overlap,omitempty" openapi:"enum=skip|allow"`
	// MaxFailures consecutive failed executions pause the schedule
	// (default 3; 0 never).
	MaxFailures *int `json:"max_failures,omitempty" openapi:"min=0,max=100"`
}

// ScheduleTemplateEdit is an edit's task: events.ScheduleTemplate's fields,
// none required (a field left out keeps the template's).
type ScheduleTemplateEdit struct {
	TaskTypeID  string          `json:"task_type_id,omitempty" openapi:"format=uuid"`
	Title       string          `json:"title,omitempty" openapi:"nonblank,maxLength=500"`
	Description string          `json:"description,omitempty" openapi:"maxLength=100000"`
	Params      json.RawMessage `json:"params,omitempty"`
	Priority    events.Priority `json:"priority,omitempty"`
	AssignedTo  string          `json:"assigned_to,omitempty" openapi:"format=uuid"`
}

// spec is the request as a new schedule's definition.
func (r ScheduleRequest) spec() events.ScheduleSpec {
	spec := events.ScheduleSpec{Name: r.Name, Overlap: r.Overlap, MaxFailures: events.DefaultMaxFailures,
		ScheduleTiming: events.ScheduleTiming{Interval: r.Interval, Cron: r.Cron, TimeZone: r.TimeZone,
			StartAt: r.StartAt, EndAt: r.EndAt, MaxRuns: r.MaxRuns}}
	if r.Task != nil {
		spec.Task = *r.Task
	}
	if r.MaxFailures != nil {
		spec.MaxFailures = *r.MaxFailures
	}
	return spec
}

// reasonBody is the optional body of pause and cancel.
type scheduleReasonRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ScheduleRun is what run now answers: the schedule and the task it made.
type ScheduleRun struct {
	Schedule *events.Schedule `json:"schedule"`
	Task     *events.Task     `json:"task"`
}

// ExecutionPage is one page of a schedule's executions, newest first.
type ExecutionPage struct {
	Executions []store.Execution `json:"executions"`
	// NextBefore is the before of the next page; null on the last.
	NextBefore *int `json:"next_before"`
}

// paramsCheck is the schema check schedules use, at creation and edits (in
// the store's transaction) and at every firing.
func (s *Server) paramsCheck(tt *events.TaskType, params json.RawMessage) error {
	return s.schemas.validate(tt, params)
}

// NewParamsCheck returns a params check for the scheduler: the JSON Schema
// validation the API applies, with its own compiled-schema cache.
func NewParamsCheck() store.ParamsCheck { return newSchemas().validate }

// CreateSchedule defines a schedule; its template is checked like a task.
func (s *Server) CreateSchedule(ctx context.Context, req ScheduleRequest, meta events.Meta) (*events.Schedule, error) {
	sc, err := s.db.CreateSchedule(ctx, req.spec(), s.paramsCheck, meta)
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// CreateScheduleJSON is CreateSchedule from a JSON body (the admin UI's
// form is turned into one), decoded as strictly as the API's.
func (s *Server) CreateScheduleJSON(ctx context.Context, body []byte, meta events.Meta) (*events.Schedule, error) {
	var req ScheduleRequest
	if err := decodeJSON(bytes.NewReader(body), &req, false); err != nil {
		return nil, err
	}
	return s.CreateSchedule(ctx, req, meta)
}

// UpdateSchedule edits schedule id: the JSON body's fields replace the
// current ones (strictly decoded: an unknown field is a 400). Giving an
// interval replaces a cron expression and the other way round.
func (s *Server) UpdateSchedule(ctx context.Context, id string, body []byte, meta events.Meta) (*events.Schedule, error) {
	var given map[string]json.RawMessage
	_ = json.Unmarshal(body, &given)
	sc, err := s.db.UpdateSchedule(ctx, id, func(spec *events.ScheduleSpec) error {
		if err := decodeJSON(bytes.NewReader(body), spec, false); err != nil {
			return err
		}
		_, hasCron := given["cron"]
		_, hasInterval := given["interval"]
		switch {
		case hasInterval && !hasCron && spec.Interval != nil:
			spec.Cron = ""
		case hasCron && !hasInterval && spec.Cron != "":
			spec.Interval = nil
		}
		return nil
	}, s.paramsCheck, meta)
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// PauseSchedule, ResumeSchedule, CancelSchedule and RunSchedule are the
// actions (409 invalid_transition from a state that forbids them).
func (s *Server) PauseSchedule(ctx context.Context, id, reason string, meta events.Meta) (*events.Schedule, error) {
	sc, err := s.db.PauseSchedule(ctx, id, reason, meta)
	if err == nil {
	}
	return sc, err
}

func (s *Server) ResumeSchedule(ctx context.Context, id string, meta events.Meta) (*events.Schedule, error) {
	sc, err := s.db.ResumeSchedule(ctx, id, meta)
	if err == nil {
	}
	return sc, err
}

func (s *Server) CancelSchedule(ctx context.Context, id, reason string, meta events.Meta) (*events.Schedule, error) {
	sc, err := s.db.CancelSchedule(ctx, id, reason, meta)
	if err == nil {
	}
	return sc, err
}

func (s *Server) RunSchedule(ctx context.Context, id string, meta events.Meta) (*ScheduleRun, error) {
	sc, t, err := s.db.RunScheduleNow(ctx, id, s.paramsCheck, meta)
	if err != nil {
		return nil, err
	}
	return &ScheduleRun{Schedule: sc, Task: t}, nil
}

func (s *Server) createSchedule(c echo.Context) error {
	var req ScheduleRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	sc, err := s.CreateSchedule(c.Request().Context(), req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, sc)
}

func (s *Server) listSchedules(c echo.Context) error {
	f := store.ScheduleFilter{}
	if v := c.QueryParam("state"); v != "" {
		if !events.ScheduleState(v).Valid() {
			return events.Invalid("state", "must be one of active, paused, cancelled, finished")
		}
		f.State = events.ScheduleState(v)
	}
	var err error
	if v := c.QueryParam("task_type_id"); v != "" {
		if f.TaskTypeID, err = parseUUID("task_type_id", v); err != nil {
			return err
		}
	}
	if v := c.QueryParam("after"); v != "" {
		if f.After, err = parseUUID("after", v); err != nil {
			return err
		}
	}
	if f.Limit, err = intQueryParam(c, "limit", 1, 500, 100); err != nil {
		return err
	}
	list, err := s.db.ListSchedules(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, list)
}

// intQueryParam reads an optional integer query parameter within bounds.
func intQueryParam(c echo.Context, name string, lo, hi, def int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, events.Invalid(name, "must be a whole number from %d to %d", lo, hi)
	}
	return n, nil
}

func (s *Server) getSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	sc, err := s.db.GetSchedule(c.Request().Context(), s.db.Pool(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, sc)
}

func (s *Server) updateSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	// Check the body's shape before touching the schedule: unknown fields
	// and wrong types answer 400 whatever the schedule's state.
	var probe ScheduleEdit
	if err := decodeJSON(bytes.NewReader(body), &probe, false); err != nil {
		return err
	}
	sc, err := s.UpdateSchedule(c.Request().Context(), id, body, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, sc)
}

func (s *Server) scheduleAction(c echo.Context, act func(ctx context.Context, id, reason string, meta events.Meta) (*events.Schedule, error), withReason bool) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req scheduleReasonRequest
	if withReason {
		if err := decode(c, &req, true); err != nil {
			return err
		}
	}
	sc, err := act(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, sc)
}

func (s *Server) pauseSchedule(c echo.Context) error {
	return s.scheduleAction(c, s.PauseSchedule, true)
}

func (s *Server) cancelSchedule(c echo.Context) error {
	return s.scheduleAction(c, s.CancelSchedule, true)
}

func (s *Server) resumeSchedule(c echo.Context) error {
	return s.scheduleAction(c, func(ctx context.Context, id, _ string, meta events.Meta) (*events.Schedule, error) {
		return s.ResumeSchedule(ctx, id, meta)
	}, false)
}

func (s *Server) runSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	run, err := s.RunSchedule(c.Request().Context(), id, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, run)
}

func (s *Server) scheduleExecutions(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	before, err := intQueryParam(c, "before", 1, 1<<31-1, 0)
	if err != nil {
		return err
	}
	limit, err := intQueryParam(c, "limit", 1, 500, 50)
	if err != nil {
		return err
	}
	exs, err := s.db.ScheduleExecutions(c.Request().Context(), id, before, limit)
	if err != nil {
		return err
	}
	page := ExecutionPage{Executions: exs}
	if len(exs) == limit && exs[len(exs)-1].Run > 1 {
		next := exs[len(exs)-1].Run
		page.NextBefore = &next
	}
	return ok(c, http.StatusOK, page)
}

func (s *Server) scheduleStats(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	st, err := s.db.GetScheduleStats(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, st)
}

func (s *Server) scheduleMetrics(c echo.Context) error {
	m, err := s.db.GetScheduleMetrics(c.Request().Context())
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, m)
}

// scheduleRoutes are the schedules' rows of the route table.
func (s *Server) scheduleRoutes() []route {
	const p = "/api/v1/admin/schedules"
	const bad, notFound, conflict, okay = http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusOK
	const tag = "schedules"
	states := []any{events.ScheduleStateActive, events.ScheduleStatePaused, events.ScheduleStateCancelled, events.ScheduleStateFinished}
	return []route{
		{method: http.MethodPost, path: p, id: "createSchedule", idempotent: true, summary: "Create a schedule: a task template with an interval, a cron expression in a time zone, or one time", role: roleAdmin, handler: s.createSchedule, tag: tag,
			request: ScheduleRequest{}, status: http.StatusCreated, response: events.Schedule{}, errors: []int{bad, conflict}},
		{method: http.MethodGet, path: p, id: "listSchedules", summary: "List schedules, newest first", role: roleAdmin, handler: s.listSchedules, tag: tag,
			query: []param{
				{name: "state", doc: "only schedules in this state", schema: map[string]any{"type": "string", "enum": states}},
				uuidParam("task_type_id", "only schedules whose template has this type"),
				uuidParam("after", "the id of the last schedule of the previous page"),
				intParam("limit", 1, 500, "page size (default 100)"),
			},
			status: okay, response: []events.Schedule{}, errors: []int{bad}},
		{method: http.MethodGet, path: p + "/metrics", id: "getScheduleMetrics", summary: "Scheduler metrics: due in the next hour; fired, skipped and failed in the last 24 hours; firing delay p50/p99", role: roleAdmin, handler: s.scheduleMetrics, tag: tag,
			status: okay, response: store.ScheduleMetrics{}, errors: []int{}},
		{method: http.MethodGet, path: p + "/:id", id: "getSchedule", summary: "Read a schedule", role: roleAdmin, handler: s.getSchedule, tag: tag,
			status: okay, response: events.Schedule{}, errors: []int{bad, notFound}},
		{method: http.MethodPut, path: p + "/:id", id: "updateSchedule", summary: "Edit a schedule: the fields given replace the current ones", role: roleAdmin, handler: s.updateSchedule, tag: tag,
			request: ScheduleEdit{}, status: okay, response: events.Schedule{}, errors: []int{bad, notFound, conflict, statusUnknownRef}},
		{method: http.MethodPost, path: p + "/:id/pause", id: "pauseSchedule", summary: "Pause an active schedule", role: roleAdmin, handler: s.pauseSchedule, tag: tag,
			request: scheduleReasonRequest{}, emptyBody: true, status: okay, response: events.Schedule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: p + "/:id/resume", id: "resumeSchedule", summary: "Resume a paused schedule from its next slot", role: roleAdmin, handler: s.resumeSchedule, tag: tag,
			status: okay, response: events.Schedule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: p + "/:id/cancel", id: "cancelSchedule", summary: "Cancel an active or paused schedule for good", role: roleAdmin, handler: s.cancelSchedule, tag: tag,
			request: scheduleReasonRequest{}, emptyBody: true, status: okay, response: events.Schedule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: p + "/:id/run", id: "runSchedule", idempotent: true, summary: "Run the schedule now, once (its regular times stay)", role: roleAdmin, handler: s.runSchedule, tag: tag,
			status: http.StatusCreated, response: ScheduleRun{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodGet, path: p + "/:id/executions", id: "listScheduleExecutions", summary: "A schedule's executions, newest first: task, outcome of its retry chain, attempts, timings", role: roleAdmin, handler: s.scheduleExecutions, tag: tag,
			query: []param{
				intParam("before", 1, 1<<31-1, "the next_before of the previous page"),
				intParam("limit", 1, 500, "page size (default 50)"),
			},
			status: okay, response: ExecutionPage{}, errors: []int{bad, notFound}},
		{method: http.MethodGet, path: p + "/:id/stats", id: "getScheduleStats", summary: "A schedule's runs, success rate, average and p95 duration, last failure", role: roleAdmin, handler: s.scheduleStats, tag: tag,
			status: okay, response: store.ScheduleStats{}, errors: []int{bad, notFound}},
	}
}
