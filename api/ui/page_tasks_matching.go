package ui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

// uiBulkBudget bounds one confirmed bulk action in the UI: no new API
// round starts after it (each round is bounded too, api.BulkTimeBudget);
// past it the page offers to continue.
const uiBulkBudget = 30 * time.Second

// criterion is one filter of the list, as the confirm step names it.
type criterion struct{ Label, Value string }

type matchingData struct {
	Action   string // cancel or retry
	Verb     string // Cancel, Retry
	Past     string // cancelled, retried
	Filter   string // the list's query (no cursor), carried by the form
	Back     string // the list with that filter
	Criteria []criterion
	Count    int
	AtLeast  bool
	Reason   string
	After    string // where a continued run goes on
	Error    string
	Result   *api.BulkResult // after a run; nil on the confirm step
}

var matchingVerbs = map[string][2]string{"cancel": {"Cancel", "cancelled"}, "retry": {"Retry", "retried"}}

// listFilter is the list's query without its cursor and empty values: what
// "all matching" means.
func listFilter(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		if k == "after" || k == "limit" || k == "sort" { // where the list is, not what it matches
			continue
		}
		for _, v := range vs {
			if strings.TrimSpace(v) != "" {
				out.Add(k, v)
			}
		}
	}
	return out
}

// bulkParams is the list's filter as the API's bulk route takes it.
func bulkParams(q url.Values) api.TaskFilterParams {
	return api.TaskFilterParams{Status: q.Get("status"), TaskTypeID: q.Get("type"), Priority: q.Get("priority"),
		AssignedTo: q.Get("assignee"), Unassigned: q.Get("queue") != "", Retries: q.Get("retries") != "",
		Stuck: q.Get("stuck") != "", Q: q.Get("q")}
}

// matchingURL is the confirm step of action on the list filtered by q.
func matchingURL(action string, q url.Values) string {
	v := listFilter(q)
	v.Set("action", action)
	return "/tasks/matching?" + v.Encode()
}

// matching is the confirm step: how many tasks the action would change,
// under which filter, and the form that does it.
func (u *UI) matching(c echo.Context) error {
	q := c.QueryParams()
	d, err := u.matchingData(c.Request().Context(), q.Get("action"), listFilter(q))
	if err != nil {
		return u.fail(c, err)
	}
	if err := u.count(c, d); err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "tasks_matching", d)
}

// count fills d's count from a dry run.
func (u *UI) count(c echo.Context, d *matchingData) error {
	action := d.Action
	dry, err := u.api.BulkTasks(c.Request().Context(), api.BulkTasksRequest{Action: &action, Filter: paramsOf(d), DryRun: true}, actor(c))
	if err != nil {
		return err
	}
	d.Count, d.AtLeast = dry.Matching, dry.MatchingAtLeast
	return nil
}

func paramsOf(d *matchingData) *api.TaskFilterParams {
	q, _ := url.ParseQuery(d.Filter)
	p := bulkParams(q)
	return &p
}

// runMatching runs a confirmed bulk action, round after round, until no
// task is left or uiBulkBudget has passed, and shows what it did.
func (u *UI) runMatching(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	filter, err := url.ParseQuery(form.Get("filter"))
	if err != nil {
		return u.fail(c, events.Invalid("filter", "is not a list filter"))
	}
	ctx := c.Request().Context()
	d, err := u.matchingData(ctx, form.Get("action"), listFilter(filter))
	if err != nil {
		return u.fail(c, err)
	}
	d.Reason = strings.TrimSpace(form.Get("reason"))
	req := api.BulkTasksRequest{Action: &d.Action, Filter: paramsOf(d), Reason: d.Reason, After: form.Get("after")}
	total := &api.BulkResult{Action: d.Action, Skips: []api.BulkSkip{}}
	deadline := time.Now().Add(uiBulkBudget)
	for {
		res, err := u.api.BulkTasks(ctx, req, actor(c))
		if err != nil {
			fe, status, ferr := errorsOf(err)
			if ferr != nil {
				return u.fail(c, ferr)
			}
			if total.Matching > 0 { // a later round refused: show what was done
				break
			}
			for _, m := range fe {
				d.Error = m
			}
			if err := u.count(c, d); err != nil {
				return u.fail(c, err)
			}
			return u.render(c, status, "tasks_matching", d)
		}
		addRound(total, res)
		if res.NextCursor == "" {
			break
		}
		req.After = res.NextCursor
		if time.Now().After(deadline) {
			d.After = res.NextCursor
			break
		}
	}
	d.Result = total
	return u.render(c, http.StatusOK, "tasks_matching", d)
}

func addRound(total, res *api.BulkResult) {
	total.Matching += res.Matching
	total.Done += res.Done
	total.Skipped += res.Skipped
	for _, s := range res.Skips {
		if len(total.Skips) < 10 {
			total.Skips = append(total.Skips, s)
		}
	}
}

// matchingData checks the action and the filter (refusing an empty one,
// as the API does) and names the filter's criteria for people.
func (u *UI) matchingData(ctx context.Context, action string, filter url.Values) (*matchingData, error) {
	verbs, ok := matchingVerbs[action]
	if !ok {
		return nil, events.Invalid("action", "must be cancel or retry")
	}
	if _, err := taskFilter(filter); err != nil {
		return nil, err
	}
	d := &matchingData{Action: action, Verb: verbs[0], Past: verbs[1], Filter: filter.Encode(), Back: "/tasks?" + filter.Encode()}
	types, err := u.db.ListTaskTypes(ctx, true)
	if err != nil {
		return nil, err
	}
	workers, err := u.userNames(ctx, filter.Get("assignee"))
	if err != nil {
		return nil, err
	}
	typeNames := map[string]string{}
	for _, tt := range types {
		typeNames[tt.ID] = tt.Label
		if tt.Label == "" {
			typeNames[tt.ID] = tt.Name
		}
	}
	add := func(label, value string) {
		if value != "" {
			d.Criteria = append(d.Criteria, criterion{label, value})
		}
	}
	add("Title contains", filter.Get("q"))
	add("Status", filter.Get("status"))
	add("Type", or(typeNames[filter.Get("type")], filter.Get("type")))
	add("Priority", filter.Get("priority"))
	add("Assignee", or(workers[filter.Get("assignee")], filter.Get("assignee")))
	for _, flag := range []struct{ key, label string }{{"queue", "Queue only"}, {"retries", "Retries only"}, {"stuck", "Stuck"}} {
		if filter.Get(flag.key) != "" {
			add(flag.label, "yes")
		}
	}
	if len(d.Criteria) == 0 {
		return nil, events.Invalid("filter", "is empty: filter the list first, then act on all it matches")
	}
	return d, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
