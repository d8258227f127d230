package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type taskData struct {
	D       *store.TaskDetail
	Chain   *store.Chain
	LLM     *store.TaskUsage // the task's LLM usage and its chain's
	Events  []eventRow
	Assign  *workerPicker // the assign form's worker
	Names   map[string]string
	Watch   string // the chain's task ids, for the live refresh
	Prios   []events.Priority
	AsOf    *events.Task
	At      string
	AtError string
	Action  string                // the action whose form failed
	Errs    map[string]formErrors // its errors by field, under its name
	Form    url.Values            // what was sent
	Params  string                // params as JSON, for the edit form
	Shown   shownJSON             // params as the page shows them
	Result  shownJSON
	// Checkpoint is the state of the chain's latest checkpoint (D.Checkpoint).
	Checkpoint shownJSON
	MaxRetry   int
	// Files is for the task data page (issue 14): the uploads to list in
	// the "task-data" slot.
	Files any
}

// eventRow is a timeline line: what the templates show of the API's view of
// the event, and its JSON as the line shows it. Its fields are its own, not
// an embedded view's: html/template looks a field up by name on every use,
// and through an embedded struct that lookup was a fifth of a 100-row
// page's rendering.
type eventRow struct {
	Position, OccurredAt, Type, StreamType, StreamID, Summary string
	Actor                                                     api.ActorView
	Raw                                                       shownJSON
}

// eventRows are the timeline lines of views.
func eventRows(views []api.EventView) []eventRow {
	rows := make([]eventRow, len(views))
	for i, v := range views {
		rows[i] = eventRow{Position: v.Position, OccurredAt: v.OccurredAt, Type: v.Type, StreamType: v.StreamType,
			StreamID: v.StreamID, Summary: v.Summary, Actor: v.Actor, Raw: showJSON(compactJSON(v), maxShownRowJSON, "")}
	}
	return rows
}

func (u *UI) task(c echo.Context) error {
	return u.renderTask(c, http.StatusOK, "", nil)
}

// renderTask shows task :id; after a refused action, with that action's
// form open and its errors at their fields.
func (u *UI) renderTask(c echo.Context, status int, action string, errs formErrors) error {
	ctx := c.Request().Context()
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return u.notFound(c, "no task "+c.Param("id"))
	}
	d := taskData{Action: action, Errs: map[string]formErrors{action: errs}, Prios: allPriorities()}
	if action != "" {
		d.Form, _ = c.FormParams()
	}
	if d.D, err = u.db.GetTaskDetail(ctx, id); err != nil {
		return u.fail(c, err)
	}
	if d.D.TaskType != nil {
		d.MaxRetry = d.D.TaskType.MaxRetries
	}
	d.Params = formJSON(d.D.Params)
	d.Shown = showJSON(d.D.Params, maxShownJSON, "/tasks/"+id+"/params.json")
	d.Result = showJSON(d.D.Result, maxShownJSON, "/tasks/"+id+"/result.json")
	if cp := d.D.Checkpoint; cp != nil {
		d.Checkpoint = showJSON(cp.State, maxShownJSON, "")
	}
	if d.Chain, err = u.db.TaskChain(ctx, u.db.Pool(), id); err != nil {
		return u.fail(c, err)
	}
	if d.LLM, err = u.db.TaskUsage(ctx, id); err != nil {
		return u.fail(c, err)
	}
	ids := make([]string, 0, len(d.Chain.Attempts))
	for _, a := range d.Chain.Attempts {
		ids = append(ids, a.TaskID)
	}
	d.Watch = strings.Join(ids, " ")
	evs, err := u.db.TaskStream(ctx, u.db.Pool(), id)
	if err != nil {
		return u.fail(c, err)
	}
	views, err := u.api.EventViews(ctx, evs)
	if err != nil {
		return u.fail(c, err)
	}
	d.Events = eventRows(views)
	if d.D.Status == events.StatusPending { // only a pending task has the assign form
		assign := ""
		if action == "assign" {
			assign = d.Form.Get("assigned_to")
		}
		if d.Assign, err = u.workerPicker(ctx, "assigned_to", "assign-worker", "choose a worker", assign, errs["assigned_to"]); err != nil {
			return u.fail(c, err)
		}
	}
	if at := c.QueryParam("at"); at != "" {
		d.At = at
		t, perr := time.Parse(time.RFC3339Nano, at)
		if perr != nil {
			d.AtError = "Give a time like 2026-11-21T23:02:49Z."
			status = http.StatusBadRequest
		} else if d.AsOf, err = u.db.TaskAt(ctx, u.db.Pool(), id, t); err != nil {
			if !errors.Is(err, events.ErrNotFound) {
				return u.fail(c, err)
			}
			d.AtError = "The task did not exist yet at " + at + "."
			if errors.Is(err, store.ErrCompacted) {
				d.AtError = "The task was compacted past the event retention: only its final state is kept here; its state at " +
					at + " is in the archive (see its timeline)."
			}
		}
	}
	if d.Names, err = u.userNames(ctx, taskPeople(d.D, d.AsOf)...); err != nil {
		return u.fail(c, err)
	}
	return u.render(c, status, "task", d)
}

// taskPeople are the users the task page names: its assignee (now and as
// of the time asked for), its checkpoint's worker, and who took part in
// its assignments.
func taskPeople(t *store.TaskDetail, asOf *events.Task) []string {
	var ids []string
	if t.AssignedTo != nil {
		ids = append(ids, *t.AssignedTo)
	}
	if asOf != nil && asOf.AssignedTo != nil {
		ids = append(ids, *asOf.AssignedTo)
	}
	if t.Checkpoint != nil {
		ids = append(ids, t.Checkpoint.WorkerID)
	}
	for _, a := range t.Assignments {
		ids = append(ids, a.WorkerID)
		if a.AssignedBy != nil {
			ids = append(ids, *a.AssignedBy)
		}
	}
	return ids
}

// taskAction runs one admin command from a task page's form: on success
// back to the task (or to where to), on a refusal the page again with the
// errors at their fields.
func (u *UI) taskAction(c echo.Context, action string, run func(id string, form url.Values) (to string, err error)) error {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return u.notFound(c, "no task "+c.Param("id"))
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	to, err := run(id, form)
	if err != nil {
		if errors.Is(err, events.ErrNotFound) && strings.Contains(err.Error(), id) {
			return u.fail(c, err)
		}
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.renderTask(c, status, action, fe)
	}
	if to == "" {
		to = "/tasks/" + id
	}
	return c.Redirect(http.StatusSeeOther, to)
}

func (u *UI) cancelTask(c echo.Context) error {
	return u.taskAction(c, "cancel", func(id string, f url.Values) (string, error) {
		_, err := u.api.CancelTask(c.Request().Context(), id, strings.TrimSpace(f.Get("reason")), actor(c))
		return "", err
	})
}

func (u *UI) releaseTask(c echo.Context) error {
	return u.taskAction(c, "release", func(id string, f url.Values) (string, error) {
		_, err := u.db.ReleaseBlocked(c.Request().Context(), u.db.Pool(), id, strings.TrimSpace(f.Get("reason")), actor(c))
		return "", err
	})
}

func (u *UI) assignTask(c echo.Context) error {
	return u.taskAction(c, "assign", func(id string, f url.Values) (string, error) {
		worker, err := u.resolveWorker(c.Request().Context(), "assigned_to", f.Get("assigned_to"))
		if err != nil {
			return "", err
		}
		_, err = u.api.AssignTask(c.Request().Context(), id,
			api.AssignRequest{AssignedTo: worker, Reason: strings.TrimSpace(f.Get("reason"))}, actor(c))
		return "", err
	})
}

func (u *UI) retryTask(c echo.Context) error {
	return u.taskAction(c, "retry", func(id string, f url.Values) (string, error) {
		retry, err := u.api.RetryTask(c.Request().Context(), id, f.Get("hint"), actor(c))
		if err != nil {
			return "", err
		}
		return "/tasks/" + retry.ID, nil
	})
}

func (u *UI) editTask(c echo.Context) error {
	return u.taskAction(c, "edit", func(id string, f url.Values) (string, error) {
		title, desc := f.Get("title"), f.Get("description")
		req := api.EditTaskRequest{Title: &title, Description: &desc}
		if p := events.Priority(f.Get("priority")); p != "" {
			req.Priority = &p
		}
		params, err := formValueJSON("params", f.Get("params"))
		if err != nil {
			return "", err
		}
		req.Params = params
		_, err = u.api.EditTask(c.Request().Context(), id, req, actor(c))
		return "", err
	})
}
