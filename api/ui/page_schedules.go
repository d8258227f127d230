package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/timing"
)

// The Schedules pages (issue 13): the list, a new schedule, and a
// schedule's page with its actions, stats, executions and edit form. They
// read through the store and act through the API's commands.

type schedulesData struct {
	Schedules []*events.Schedule
	State     string
	Types     map[string]string
}

func (u *UI) schedules(c echo.Context) error {
	ctx := c.Request().Context()
	state := c.QueryParam("state")
	if state != "" && !events.ScheduleState(state).Valid() {
		state = ""
	}
	list, err := u.db.ListSchedules(ctx, store.ScheduleFilter{State: events.ScheduleState(state), Limit: 500})
	if err != nil {
		return u.fail(c, err)
	}
	types, err := u.typeNames(c)
	if err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "schedules", schedulesData{Schedules: list, State: state, Types: types})
}

func (u *UI) typeNames(c echo.Context) (map[string]string, error) {
	ts, err := u.db.ListTaskTypes(c.Request().Context(), true)
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	for _, t := range ts {
		names[t.ID] = t.Name
	}
	return names, nil
}

// scheduleForm is the create and edit form.
type scheduleForm struct {
	Schedule *events.Schedule // nil when creating
	Types    []events.TaskType
	Assignee *workerPicker // the task's assignee
	Form     url.Values
	Errors   formErrors
	// On the schedule's page.
	Stats      *store.ScheduleStats
	Executions []store.Execution
	NextBefore int
	When       string
	// Before is the page of executions shown (0: the newest); Watch the
	// streams whose events refresh the page: the schedule and the latest
	// task of each execution that has not ended.
	Before int
	Watch  string
}

func scheduleValues(s *events.Schedule) url.Values {
	v := url.Values{}
	if s == nil {
		v.Set("interval.every", "1")
		v.Set("interval.unit", events.UnitHours)
		v.Set("time_zone", "UTC")
		v.Set("task.params", "{}")
		v.Set("task.priority", string(events.PriorityMedium))
		v.Set("overlap", events.OverlapSkip)
		v.Set("max_failures", strconv.Itoa(events.DefaultMaxFailures))
		return v
	}
	v.Set("name", s.Name)
	v.Set("task.task_type_id", s.Task.TaskTypeID)
	v.Set("task.title", s.Task.Title)
	v.Set("task.description", s.Task.Description)
	v.Set("task.params", formJSON(s.Task.Params))
	v.Set("task.priority", string(s.Task.Priority))
	v.Set("task.assigned_to", s.Task.AssignedTo)
	if s.Interval != nil {
		v.Set("interval.every", strconv.Itoa(s.Interval.Every))
		v.Set("interval.unit", s.Interval.Unit)
	}
	v.Set("cron", s.Cron)
	v.Set("time_zone", s.TimeZone)
	for name, t := range map[string]*time.Time{"start_at": s.StartAt, "end_at": s.EndAt} {
		if t != nil {
			v.Set(name, t.UTC().Format(time.RFC3339))
		}
	}
	if s.MaxRuns > 0 {
		v.Set("max_runs", strconv.Itoa(s.MaxRuns))
	}
	v.Set("overlap", s.Overlap)
	v.Set("max_failures", strconv.Itoa(s.MaxFailures))
	return v
}

// scheduleBody turns the form into the API's JSON body: every field, so an
// edit replaces the whole definition (empty fields clear).
func scheduleBody(f url.Values) ([]byte, error) {
	get := func(k string) string { return strings.TrimSpace(f.Get(k)) }
	task := map[string]any{"task_type_id": get("task.task_type_id"), "title": get("task.title"),
		"description": f.Get("task.description"), "priority": get("task.priority"), "assigned_to": get("task.assigned_to")}
	params, err := formValueJSON("task.params", get("task.params"))
	if err != nil {
		return nil, err
	}
	if params == nil {
		params = json.RawMessage("{}")
	}
	task["params"] = params
	body := map[string]any{"name": get("name"), "task": task, "cron": get("cron"), "time_zone": get("time_zone"),
		"overlap": get("overlap"), "max_runs": 0}
	num := func(field string) (int, error) {
		n, err := strconv.Atoi(get(field))
		if err != nil {
			return 0, events.Invalid(field, "must be a whole number")
		}
		return n, nil
	}
	if get("interval.every") != "" && get("cron") == "" {
		n, err := num("interval.every")
		if err != nil {
			return nil, err
		}
		body["interval"] = map[string]any{"every": n, "unit": get("interval.unit")}
	}
	for _, field := range []string{"start_at", "end_at"} {
		if v := get(field); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, events.Invalid(field, "must be a time like 2026-12-01T06:00:00Z")
			}
			body[field] = t
		}
	}
	for _, field := range []string{"max_runs", "max_failures"} {
		if get(field) != "" {
			n, err := num(field)
			if err != nil {
				return nil, err
			}
			body[field] = n
		}
	}
	return json.Marshal(body)
}

// formErrorsOf places a command's error at its form field; a params path
// (task.params.days) shows at the params box.
func formErrorsOf(err error) (formErrors, int, error) {
	fe, status, ferr := errorsOf(err)
	if ferr != nil {
		return nil, 0, ferr
	}
	for k, msg := range fe {
		if strings.HasPrefix(k, "task.params.") {
			fe["task.params"] = strings.TrimPrefix(k, "task.") + ": " + msg
		}
	}
	return fe, status, nil
}

// choices fills what the form's pickers offer: task types (archived ones
// too on an existing schedule's page) and workers.
func (u *UI) choices(ctx context.Context, d *scheduleForm, archived bool) (err error) {
	if d.Types, err = u.db.ListTaskTypes(ctx, archived); err != nil {
		return err
	}
	d.Assignee, err = u.workerPicker(ctx, "task.assigned_to", "f-task-assigned_to", "the pool", d.Form.Get("task.assigned_to"), d.Errors["task.assigned_to"])
	return err
}

// scheduleJSON is scheduleBody with the assignee a picker sent turned
// into its id.
func (u *UI) scheduleJSON(ctx context.Context, form url.Values) ([]byte, error) {
	worker, err := u.resolveWorker(ctx, "task.assigned_to", form.Get("task.assigned_to"))
	if err != nil {
		return nil, err
	}
	f := cloneValues(form)
	f.Set("task.assigned_to", worker)
	return scheduleBody(f)
}

func (u *UI) newSchedule(c echo.Context) error {
	form := scheduleValues(nil)
	if id := c.QueryParam("type"); id != "" {
		form.Set("task.task_type_id", id)
	}
	d := scheduleForm{Form: form}
	if err := u.choices(c.Request().Context(), &d, false); err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "schedule_new", d)
}

func (u *UI) createSchedule(c echo.Context) error {
	ctx := c.Request().Context()
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	var s *events.Schedule
	body, err := u.scheduleJSON(c.Request().Context(), form)
	if err == nil {
		s, err = u.api.CreateScheduleJSON(ctx, body, actor(c))
	}
	if err != nil {
		fe, status, ferr := formErrorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		d := scheduleForm{Form: form, Errors: fe}
		if err := u.choices(ctx, &d, false); err != nil {
			return u.fail(c, err)
		}
		return u.render(c, status, "schedule_new", d)
	}
	return c.Redirect(http.StatusSeeOther, "/schedules/"+s.ID)
}

func (u *UI) findSchedule(c echo.Context) (*events.Schedule, error) {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return nil, events.NotFound("schedule", c.Param("id"))
	}
	return u.db.GetSchedule(c.Request().Context(), u.db.Pool(), id)
}

// schedulePage renders a schedule's page with form (the edit form's
// values) and errors at their fields.
func (u *UI) schedulePage(c echo.Context, s *events.Schedule, status int, form url.Values, fe formErrors) error {
	ctx := c.Request().Context()
	st, err := u.db.GetScheduleStats(ctx, s.ID)
	if err != nil {
		return u.fail(c, err)
	}
	before, _ := strconv.Atoi(c.QueryParam("before"))
	const page = 25
	exs, err := u.db.ScheduleExecutions(ctx, s.ID, max(before, 0), page)
	if err != nil {
		return u.fail(c, err)
	}
	d := scheduleForm{Schedule: s, Form: form, Errors: fe, Stats: st, Executions: exs,
		When: timing.Describe(s.ScheduleTiming), Before: max(before, 0), Watch: watchSchedule(s.ID, exs)}
	if err := u.choices(ctx, &d, true); err != nil {
		return u.fail(c, err)
	}
	if len(exs) == page && exs[len(exs)-1].Run > 1 {
		d.NextBefore = exs[len(exs)-1].Run
	}
	return u.render(c, status, "schedule", d)
}

// watchSchedule lists the streams whose events change a schedule's page:
// its own, and the latest task of each execution still under way (a retry
// is announced on the task before it, which is watched).
func watchSchedule(id string, exs []store.Execution) string {
	ids := []string{id}
	for _, e := range exs {
		switch e.Outcome {
		case "completed", "failed", "cancelled":
		default:
			ids = append(ids, e.LastTaskID)
		}
	}
	return strings.Join(ids, " ")
}

func (u *UI) schedule(c echo.Context) error {
	s, err := u.findSchedule(c)
	if err != nil {
		return u.fail(c, err)
	}
	return u.schedulePage(c, s, http.StatusOK, scheduleValues(s), nil)
}

func (u *UI) updateSchedule(c echo.Context) error {
	s, err := u.findSchedule(c)
	if err != nil {
		return u.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	body, err := u.scheduleJSON(c.Request().Context(), form)
	if err == nil {
		_, err = u.api.UpdateSchedule(c.Request().Context(), s.ID, body, actor(c))
	}
	if err != nil {
		fe, status, ferr := formErrorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.schedulePage(c, s, status, form, fe)
	}
	return c.Redirect(http.StatusSeeOther, "/schedules/"+s.ID)
}

// scheduleAction runs pause, resume, cancel or run from the schedule's page.
func (u *UI) scheduleAction(c echo.Context) error {
	s, err := u.findSchedule(c)
	if err != nil {
		return u.fail(c, err)
	}
	ctx, meta, reason := c.Request().Context(), actor(c), c.FormValue("reason")
	switch c.Param("action") {
	case "pause":
		_, err = u.api.PauseSchedule(ctx, s.ID, reason, meta)
	case "resume":
		_, err = u.api.ResumeSchedule(ctx, s.ID, meta)
	case "cancel":
		_, err = u.api.CancelSchedule(ctx, s.ID, reason, meta)
	case "run":
		var run *runResult
		run, err = u.runSchedule(c, s.ID)
		if err == nil {
			return c.Redirect(http.StatusSeeOther, "/tasks/"+run.taskID)
		}
	default:
		return u.notFound(c, "no such action")
	}
	if err != nil {
		fe, status, ferr := formErrorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.schedulePage(c, s, status, scheduleValues(s), formErrors{"action": fe[firstKey(fe)]})
	}
	return c.Redirect(http.StatusSeeOther, "/schedules/"+s.ID)
}

type runResult struct{ taskID string }

func (u *UI) runSchedule(c echo.Context, id string) (*runResult, error) {
	run, err := u.api.RunSchedule(c.Request().Context(), id, actor(c))
	if err != nil {
		return nil, err
	}
	return &runResult{taskID: run.Task.ID}, nil
}

func firstKey(fe formErrors) string {
	for k := range fe {
		return k
	}
	return ""
}
