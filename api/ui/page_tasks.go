package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// taskRow is one line of the tasks list.
type taskRow struct {
	Task       events.Task
	TypeName   string
	MaxRetries int
	Assignee   string
	// Duration is how long the last run took: started to finished, or
	// "running"; "" when it never started.
	Duration string
}

// pageSizes are the list's page-size choices (the API takes up to 200).
var pageSizes = []int{25, 50, 100, 200}

type tasksData struct {
	Q        url.Values // the filters as given
	Rows     []taskRow
	Queue    int
	Next     string // the next page's URL, "" on the last page
	Types    []events.TaskType
	Assignee *workerPicker
	Statuses []events.Status
	Prios    []events.Priority
	Error    string // a filter the list refused
	Problems []string
	// CancelAll and RetryAll lead to the confirm step of acting on every
	// task the filter matches; "" when the list is not filtered.
	CancelAll, RetryAll string
	PageSizes           []int
	Sorts               []sortChoice
	Sort                string // the order shown: newest, oldest, started or longest
	// ByColumn are the links of the sortable column headings (created,
	// started, duration); First is the first page in this order.
	ByColumn map[string]string
	First    string
	// SortedBy is the column the list is in the order of: its aria-sort.
	SortedBy map[string]string
}

// sortChoice is one order of the list as the sort menu offers it.
type sortChoice struct{ Value, Label string }

// sortChoices are the list's orders: each is read in an index's order
// (store.TaskSorts), so none slows down as history grows.
var sortChoices = []sortChoice{
	{"newest", "Created, newest first"},
	{"oldest", "Created, oldest first"},
	{"started", "Started, latest first"},
	{"longest", "Duration, longest first"},
}

// taskSort reads the sort parameter; "" and "newest" are the default.
func taskSort(v string) (store.TaskSort, error) {
	switch v {
	case "", "newest":
		return store.SortNewest, nil
	case "oldest", "started", "longest":
		return store.TaskSort(v), nil
	}
	return "", events.Invalid("sort", "must be newest, oldest, started or longest")
}

// taskFilter reads the list's filters from the query, checked as the JSON
// API checks them.
func taskFilter(q url.Values) (store.TaskFilter, error) {
	f := store.TaskFilter{After: q.Get("after"), Search: strings.TrimSpace(q.Get("q")), Limit: 50,
		Unassigned: q.Get("queue") != "", Retries: q.Get("retries") != "", Stuck: q.Get("stuck") != ""}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || !slices.Contains(pageSizes, n) {
			return f, events.Invalid("limit", "must be 25, 50, 100 or 200 tasks a page")
		}
		f.Limit = n
	}
	var err error
	if f.Sort, err = taskSort(q.Get("sort")); err != nil {
		return f, err
	}
	if v := q.Get("status"); v != "" {
		if f.Status = events.Status(v); !f.Status.Valid() {
			return f, events.Invalid("status", "must be pending, in_progress, completed, failed or cancelled")
		}
	}
	if v := q.Get("priority"); v != "" {
		if f.Priority = events.Priority(v); f.Priority.Rank() < 0 {
			return f, events.Invalid("priority", "must be urgent, high, medium or low")
		}
	}
	if v := q.Get("type"); v != "" {
		if f.TaskTypeID, err = uuidField("type", v); err != nil {
			return f, err
		}
	}
	if v := q.Get("assignee"); v != "" {
		if f.AssignedTo, err = uuidField("assignee", v); err != nil {
			return f, err
		}
	}
	if len(f.Search) > 200 {
		return f, events.Invalid("q", "is longer than 200 characters")
	}
	return f, nil
}

func (u *UI) tasks(c echo.Context) error {
	return u.renderTasks(c, c.QueryParams(), http.StatusOK, nil)
}

func (u *UI) renderTasks(c echo.Context, q url.Values, status int, problems []string) error {
	ctx := c.Request().Context()
	q, err := u.resolveFilter(ctx, q, "assignee")
	d := tasksData{Q: q, Problems: problems, PageSizes: pageSizes, Statuses: allStatuses(), Prios: allPriorities(),
		Sorts: sortChoices, Sort: q.Get("sort"), ByColumn: sortLinks(q), First: pageURL(q, "")}
	if d.Sort == "" {
		d.Sort = "newest"
	}
	d.SortedBy = sortedBy(d.Sort)
	var f store.TaskFilter
	if err == nil {
		f, err = taskFilter(q)
	}
	var rerr error
	if d.Types, rerr = u.db.ListTaskTypes(ctx, true); rerr != nil {
		return u.fail(c, rerr)
	}
	if d.Assignee, rerr = u.workerPicker(ctx, "assignee", "f-assignee", "anyone", q.Get("assignee"), ""); rerr != nil {
		return u.fail(c, rerr)
	}
	if err != nil {
		fe, st, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		for _, m := range fe {
			d.Error = m
		}
		d.Assignee.Error = fe["assignee"]
		return u.render(c, st, "tasks", d)
	}
	page, err := u.db.ListTasks(ctx, f)
	if err != nil {
		if fe, st, ferr := errorsOf(err); ferr == nil {
			for _, m := range fe {
				d.Error = m
			}
			return u.render(c, st, "tasks", d)
		}
		return u.fail(c, err)
	}
	d.Queue = page.QueueDepth
	ids := make([]string, 0, len(page.Tasks))
	for _, t := range page.Tasks {
		if t.AssignedTo != nil {
			ids = append(ids, *t.AssignedTo)
		}
	}
	names, err := u.userNames(ctx, ids...)
	if err != nil {
		return u.fail(c, err)
	}
	d.Rows = u.taskRows(page.Tasks, d.Types, names)
	if len(listFilter(q)) > 0 {
		d.CancelAll, d.RetryAll = matchingURL("cancel", q), matchingURL("retry", q)
	}
	if page.NextCursor != "" {
		d.Next = pageURL(q, page.NextCursor)
	}
	return u.render(c, status, "tasks", d)
}

// pageURL is the list as q has it, filters, order and page size kept, at
// the page after cursor ("" for the first).
func pageURL(q url.Values, cursor string) string {
	v := cloneValues(q)
	v.Del("after")
	if cursor != "" {
		v.Set("after", cursor)
	}
	return "/tasks?" + v.Encode()
}

// sortedBy is the aria-sort of the column the list is in the order of.
func sortedBy(sort string) map[string]string {
	switch sort {
	case "oldest":
		return map[string]string{"created": "ascending"}
	case "started":
		return map[string]string{"started": "descending"}
	case "longest":
		return map[string]string{"duration": "descending"}
	}
	return map[string]string{"created": "descending"}
}

// sortLinks are the column headings' links: the created heading turns
// the order around, the others sort by their column.
func sortLinks(q url.Values) map[string]string {
	by := func(sort string) string {
		v := cloneValues(q)
		v.Set("sort", sort)
		return pageURL(v, "")
	}
	created := by("oldest")
	if q.Get("sort") == "oldest" {
		created = by("newest")
	}
	return map[string]string{"created": created, "started": by("started"), "duration": by("longest")}
}

// taskRows are the list's lines; names names the tasks' assignees.
func (u *UI) taskRows(ts []events.Task, types []events.TaskType, names map[string]string) []taskRow {
	byType := map[string]*events.TaskType{}
	for i := range types {
		byType[types[i].ID] = &types[i]
	}
	rows := make([]taskRow, len(ts))
	for i, t := range ts {
		rows[i] = taskRow{Task: t, Duration: runDuration(t)}
		if tt := byType[t.TaskTypeID]; tt != nil {
			rows[i].TypeName, rows[i].MaxRetries = tt.Label, tt.MaxRetries
			if rows[i].TypeName == "" {
				rows[i].TypeName = tt.Name
			}
		}
		if t.AssignedTo != nil {
			rows[i].Assignee = names[*t.AssignedTo]
		}
	}
	return rows
}

// runDuration is how long a task's run took, as the list shows it.
func runDuration(t events.Task) string {
	switch {
	case t.StartedAt == nil:
		return ""
	case t.CompletedAt == nil || t.CompletedAt.Before(*t.StartedAt):
		if t.Status == events.StatusInProgress {
			return "running"
		}
		return ""
	}
	d := t.CompletedAt.Sub(*t.StartedAt)
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// bulkData is the confirm step and the result of acting on the tasks
// selected on the list.
type bulkData struct {
	Action, Verb, Past string
	IDs                []string
	Titles             []string // the first few selected tasks, to check the choice
	More               int      // selected tasks not in Titles
	Reason             string
	Back               string // the list as it was (query string)
	// After the action: what it did.
	Done     bool
	Notice   string
	Problems []string
}

// bulkTitlesShown bounds the titles the confirm step lists.
const bulkTitlesShown = 20

// bulk acts on the tasks selected on the list: a first post shows what will
// change and asks to confirm; the confirmed post acts and shows the result
// on a page of its own (the list's live refresh would wipe a notice).
func (u *UI) bulk(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	back, _ := url.ParseQuery(form.Get("back"))
	ids := form["id"]
	action := form.Get("action")
	verbs, known := matchingVerbs[action]
	switch {
	case len(ids) == 0:
		return u.renderTasks(c, back, http.StatusBadRequest, []string{"Select at least one task."})
	case len(ids) > 200:
		return u.renderTasks(c, back, http.StatusBadRequest, []string{"Select at most 200 tasks at a time."})
	case !known:
		return u.renderTasks(c, back, http.StatusBadRequest, []string{"Choose cancel or retry."})
	}
	ctx := c.Request().Context()
	d := bulkData{Action: action, Verb: verbs[0], Past: verbs[1], IDs: ids, Reason: strings.TrimSpace(form.Get("reason")), Back: back.Encode()}
	if form.Get("confirm") == "" {
		for i, id := range ids {
			if i == bulkTitlesShown {
				d.More = len(ids) - i
				break
			}
			title := shortID(id) + " (not found)"
			if id, err := uuidField("id", id); err == nil {
				if t, err := u.db.GetTask(ctx, u.db.Pool(), id); err == nil {
					title = t.Title
				} else if !errors.Is(err, events.ErrNotFound) {
					return u.fail(c, err)
				}
			}
			d.Titles = append(d.Titles, title)
		}
		return u.render(c, http.StatusOK, "tasks_bulk", d)
	}
	run := func(ctx context.Context, id string) error {
		_, err := u.api.CancelTask(ctx, id, d.Reason, actor(c))
		return err
	}
	if action == "retry" {
		run = func(ctx context.Context, id string) error {
			_, err := u.api.RetryTask(ctx, id, d.Reason, actor(c))
			return err
		}
	}
	done := 0
	for _, id := range ids {
		id, err := uuidField("id", id)
		if err == nil {
			err = run(ctx, id)
		}
		if err != nil {
			fe, _, ferr := errorsOf(err)
			if ferr != nil {
				return u.fail(c, ferr)
			}
			for _, m := range fe {
				d.Problems = append(d.Problems, fmt.Sprintf("%s: %s", shortID(id), m))
			}
			continue
		}
		done++
	}
	d.Done = true
	d.Notice = fmt.Sprintf("%d of %d %s %s.", done, len(ids), plural(len(ids), "task", "tasks"), d.Past)
	status := http.StatusOK
	if done == 0 {
		status = http.StatusConflict
	}
	return u.render(c, status, "tasks_bulk", d)
}

func allStatuses() []events.Status {
	return []events.Status{events.StatusBlocked, events.StatusPending, events.StatusInProgress, events.StatusCompleted, events.StatusFailed, events.StatusCancelled}
}

func allPriorities() []events.Priority { return []events.Priority{"urgent", "high", "medium", "low"} }

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// uuidField checks an id from a form or query, blaming field.
func uuidField(field, s string) (string, error) {
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", events.Invalid(field, "must be a UUID like 0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a")
	}
	return id.String(), nil
}
