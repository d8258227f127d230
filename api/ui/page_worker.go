package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// workerData is one account's page: who it is, what it does and did, and
// the admin's actions on it.
type workerData struct {
	W        *store.WorkerView
	Tasks    []events.Task // the latest tasks assigned to it, newest first
	Metadata shownJSON
	// From the heartbeat's metadata, when task-worker sent them.
	Restarts, Version string
	Activity          []eventRow
	// Action is the form that was refused, with its values and errors.
	Action string
	Form   url.Values
	Errors formErrors
	Notice string
}

// workerNotices are what a done action says (the redirect names the action).
var workerNotices = map[string]string{
	"updated": "Saved.", "deactivated": "Deactivated: its tokens stopped working and its tasks went back to the pool.",
	"reactivated": "Reactivated: it can log in again.", "password": "Password set: its tokens stopped working.",
}

const (
	workerTasksShown    = 20
	workerActivityShown = 20
)

func (u *UI) worker(c echo.Context) error {
	return u.renderWorker(c, http.StatusOK, "", nil, nil)
}

func (u *UI) renderWorker(c echo.Context, status int, action string, form url.Values, errs formErrors) error {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return u.notFound(c, "no worker "+c.Param("id"))
	}
	ctx := c.Request().Context()
	w, err := u.db.GetWorkerView(ctx, id)
	if err != nil {
		return u.fail(c, err)
	}
	d := workerData{W: w, Action: action, Form: form, Errors: errs, Notice: workerNotices[c.QueryParam("done")],
		Metadata: showJSON(w.Metadata, maxShownRowJSON, "/workers/"+id+"/metadata.json")}
	d.Restarts, d.Version = heartbeatFacts(w.Metadata)
	page, err := u.db.ListTasks(ctx, store.TaskFilter{AssignedTo: id, Limit: workerTasksShown})
	if err != nil {
		return u.fail(c, err)
	}
	d.Tasks = page.Tasks
	evs, err := u.db.RecentEvents(ctx, workerActivityShown, store.LogFilter{WorkerID: id})
	if err != nil {
		return u.fail(c, err)
	}
	views, err := u.api.EventViews(ctx, evs)
	if err != nil {
		return u.fail(c, err)
	}
	d.Activity = eventRows(views)
	return u.render(c, status, "worker", d)
}

// heartbeatFacts reads task-worker's restart count and version from a
// heartbeat's metadata; empty when it does not carry them.
func heartbeatFacts(metadata json.RawMessage) (restarts, version string) {
	var m struct {
		RestartCount *int   `json:"restart_count"`
		Version      string `json:"version"`
	}
	if json.Unmarshal(metadata, &m) != nil {
		return "", ""
	}
	if m.RestartCount != nil {
		restarts = strconv.Itoa(*m.RestartCount)
	}
	return restarts, m.Version
}

// workerAction runs one account command from the worker page: on success
// back to the page with a notice, on a refusal the page with the errors at
// their fields.
func (u *UI) workerAction(action string, run func(c echo.Context, id string, form url.Values) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := uuidField("id", c.Param("id"))
		if err != nil {
			return u.notFound(c, "no worker "+c.Param("id"))
		}
		form, err := c.FormParams()
		if err != nil {
			return u.fail(c, events.Invalid("form", "could not be read"))
		}
		if err := run(c, id, form); err != nil {
			fe, status, ferr := errorsOf(err)
			if ferr != nil {
				return u.fail(c, ferr)
			}
			return u.renderWorker(c, status, action, form, fe)
		}
		return c.Redirect(http.StatusSeeOther, "/workers/"+id+"?done="+action)
	}
}

func (u *UI) updateWorker(c echo.Context, id string, form url.Values) error {
	name := strings.TrimSpace(form.Get("full_name"))
	admin, worker := form.Get("is_admin") != "", form.Get("is_worker") != ""
	edit := events.UserEdit{FullName: &name, IsAdmin: &admin, IsWorker: &worker}
	if v := strings.TrimSpace(form.Get("max_concurrent_tasks")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return events.Invalid("max_concurrent_tasks", "must be a whole number")
		}
		edit.MaxConcurrentTasks = &n
	}
	_, err := u.api.UpdateUser(c.Request().Context(), id, edit, actor(c))
	return err
}

func (u *UI) deactivateWorker(c echo.Context, id string, form url.Values) error {
	_, err := u.api.DeactivateUser(c.Request().Context(), id, strings.TrimSpace(form.Get("reason")), actor(c))
	return err
}

func (u *UI) reactivateWorker(c echo.Context, id string, form url.Values) error {
	_, err := u.api.ReactivateUser(c.Request().Context(), id, strings.TrimSpace(form.Get("reason")), actor(c))
	return err
}

func (u *UI) setWorkerPassword(c echo.Context, id string, form url.Values) error {
	_, err := u.api.SetUserPassword(c.Request().Context(), id, form.Get("password"), actor(c))
	return err
}
