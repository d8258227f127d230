package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// workerRow is a line of the workers table. Its fields are its own, not an
// embedded view's: html/template looks a field up by name on every use, and
// through two embedded structs (WorkerView, events.User) that lookup was
// most of the table's rendering.
type workerRow struct {
	ID, FullName, Email                                               string
	Active, Online                                                    bool
	HeartbeatStatus                                                   *string
	InProgressCount, MaxConcurrentTasks, PendingCount, CompletedToday int
	LastActivityAt                                                    *time.Time
	Current                                                           []events.Task
	Metadata                                                          shownJSON
}

func newWorkerRow(w store.WorkerView, current []events.Task) workerRow {
	return workerRow{ID: w.ID, FullName: w.FullName, Email: w.Email, Active: w.Active, Online: w.Online,
		HeartbeatStatus: w.HeartbeatStatus, InProgressCount: w.InProgressCount, MaxConcurrentTasks: w.MaxConcurrentTasks,
		PendingCount: w.PendingCount, CompletedToday: w.CompletedToday, LastActivityAt: w.LastActivityAt, Current: current,
		Metadata: showJSON(w.Metadata, maxShownRowJSON, "/workers/"+w.ID+"/metadata.json")}
}

type workersData struct {
	Workers []workerRow
	Admins  []store.WorkerView // accounts that are admins only
	Form    url.Values
	Errors  formErrors
	Created string
	// Total and Online count every worker (one count over users, as the
	// dashboard's); the table is one page of them, by name.
	Total, Online int
	First, Next   string // the first and the next page's URLs; "" when not needed
	Self          string // this page's URL, for the live refresh
}

func (u *UI) workers(c echo.Context) error {
	return u.renderWorkers(c, http.StatusOK, nil, nil, c.QueryParam("created"))
}

func (u *UI) renderWorkers(c echo.Context, status int, form url.Values, errs formErrors, created string) error {
	ctx := c.Request().Context()
	after := c.QueryParam("after")
	page, err := u.db.ListAccountsPage(ctx, store.AccountFilter{Role: store.RoleWorker, After: after})
	if err != nil {
		return u.fail(c, err)
	}
	held, err := u.db.InProgress(ctx)
	if err != nil {
		return u.fail(c, err)
	}
	byWorker := map[string][]events.Task{}
	for _, t := range held {
		if t.AssignedTo != nil {
			byWorker[*t.AssignedTo] = append(byWorker[*t.AssignedTo], t)
		}
	}
	if form == nil {
		form = url.Values{"max_concurrent_tasks": {"1"}}
	}
	d := workersData{Form: form, Errors: errs, Created: created}
	if d.Online, d.Total, err = u.db.WorkerCounts(ctx); err != nil {
		return u.fail(c, err)
	}
	d.Self = "/workers"
	if after != "" {
		d.First = "/workers"
		d.Self = "/workers?" + url.Values{"after": {after}}.Encode()
	}
	if page.NextCursor != "" {
		d.Next = "/workers?" + url.Values{"after": {page.NextCursor}}.Encode()
	}
	admins, err := u.db.ListAccounts(ctx, store.RoleAdmin)
	if err != nil {
		return u.fail(c, err)
	}
	for _, a := range admins {
		if !a.IsWorker {
			d.Admins = append(d.Admins, a)
		}
	}
	for _, w := range page.Workers {
		d.Workers = append(d.Workers, newWorkerRow(w, byWorker[w.ID]))
	}
	return u.render(c, status, "workers", d)
}

func (u *UI) createWorker(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	req := api.CreateWorkerRequest{Email: strings.TrimSpace(form.Get("email")), FullName: strings.TrimSpace(form.Get("full_name")),
		Password: form.Get("password"), IsAdmin: form.Get("is_admin") != ""}
	if form.Get("roles") != "" { // the form says the roles; without it, a worker
		isWorker := form.Get("is_worker") != ""
		req.IsWorker = &isWorker
	}
	if v := strings.TrimSpace(form.Get("max_concurrent_tasks")); v != "" {
		n, convErr := strconv.Atoi(v)
		if convErr != nil {
			err = events.Invalid("max_concurrent_tasks", "must be a whole number")
		}
		req.MaxConcurrentTasks = &n
	}
	var w *events.User
	if err == nil {
		w, err = u.api.CreateWorker(c.Request().Context(), req, actor(c))
	}
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		form.Del("password")
		return u.renderWorkers(c, status, form, fe, "")
	}
	return c.Redirect(http.StatusSeeOther, "/workers?created="+url.QueryEscape(w.Email))
}
