package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

// With more workers than a picker lists (issue 24: 200), no page reads or
// renders the fleet: each of the five forms with a worker field offers a
// text input with suggestions instead of one <option> a worker, the rows
// still name their assignees, and a worker typed by name, email or
// suggestion is the worker sent; text that names none is refused at its
// field.
func TestWorkerPickersAboveTheBound(t *testing.T) {
	s := newSite(t)
	tt, _ := s.seed()
	s.login()
	token := s.csrf()
	worker := func(name, email string) string {
		w, err := s.srv.CreateWorker(s.ctx, api.CreateWorkerRequest{Email: email, Password: "worker-password", FullName: name}, s.admin)
		require.NoError(t, err)
		return w.ID
	}
	zoe, yann := worker("Zoe Zimmer", "zoe@example.com"), worker("Yann Young", "yann@example.com")
	worker("Sam Same", "sam1@example.com")
	worker("Sam Same", "sam2@example.com")
	// The rest of the fleet straight into the users projection: the pickers
	// read nothing else.
	_, err := s.db.Pool().Exec(s.ctx, `INSERT INTO users (id, email, full_name, is_worker, created_at, version)
		SELECT gen_random_uuid(), 'bulk' || g || '@example.com', 'Bulk ' || lpad(g::text, 3, '0'), true, now(), 1
		  FROM generate_series(1, 240) g`)
	require.NoError(t, err)
	// More workers sharing a name than one read of suggestions holds.
	_, err = s.db.Pool().Exec(s.ctx, `INSERT INTO users (id, email, full_name, is_worker, created_at, version)
		SELECT gen_random_uuid(), 'many' || g || '@example.com', 'Many Same', true, now(), 1 FROM generate_series(1, 21) g`)
	require.NoError(t, err)
	// More names that start with an email than one read of suggestions
	// holds: the worker with that email still comes first.
	pat := worker("Patricia Zed", "pat@example.com")
	_, err = s.db.Pool().Exec(s.ctx, `INSERT INTO users (id, email, full_name, is_worker, created_at, version)
		SELECT gen_random_uuid(), 'pat' || g || '@example.org', 'pat@example.com ' || g, true, now(), 1 FROM generate_series(1, 21) g`)
	require.NoError(t, err)
	zoeTask, _, err := s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: "Zoe's task", TaskTypeID: tt.ID, AssignedTo: &zoe,
		Params: json.RawMessage(`{"days":1}`)}, s.admin)
	require.NoError(t, err)
	free, _, err := s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: "Nobody's task", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`)}, s.admin)
	require.NoError(t, err)
	sched, err := s.srv.CreateScheduleJSON(s.ctx, []byte(`{"name":"Zoe weekly","task":{"task_type_id":"`+tt.ID+`","title":"Weekly",
		"params":{"days":7},"assigned_to":"`+zoe+`"},"interval":{"every":1,"unit":"days"},"time_zone":"UTC"}`), s.admin)
	require.NoError(t, err)

	options := regexp.MustCompile(`<option`)
	zoeText := `value="Zoe Zimmer &lt;zoe@example.com&gt;"`
	for _, p := range []struct {
		path, input string
		shows       []string // the chosen worker, the rows' assignees
	}{
		{"/tasks", `id="f-assignee" name="assignee"`, []string{"<td class=\"hide-narrow\">Zoe Zimmer</td>"}},
		{"/tasks?assignee=" + zoe, `id="f-assignee" name="assignee"`, []string{zoeText, "Zoe&#39;s task"}},
		{"/tasks/" + zoeTask.ID, `id="assign-worker" name="assigned_to"`, []string{"<dt>Assignee</dt><dd>Zoe Zimmer</dd>"}},
		{"/tasks/new?type=" + tt.ID, `id="assigned_to" name="assigned_to"`, nil},
		{"/events?worker=" + zoe, `id="f-worker" name="worker"`, []string{zoeText}},
		{"/schedules/new", `id="f-task-assigned_to" name="task.assigned_to"`, nil},
		{"/schedules/" + sched.ID, `id="f-task-assigned_to" name="task.assigned_to"`, []string{zoeText}},
	} {
		resp, body := s.get(p.path)
		require.Equal(t, http.StatusOK, resp.StatusCode, p.path)
		require.Less(t, len(options.FindAllString(body, -1)), 100, "%s: the other pickers (types, statuses), no worker's", p.path)
		require.NotContains(t, body, "Bulk 0", p.path)
		require.Regexp(t, `<input `+regexp.QuoteMeta(p.input)+`[^>]* list="[^"]+-choices"`, body, p.path)
		for _, want := range p.shows {
			require.Contains(t, body, want, p.path)
		}
	}
	_, body := s.get("/tasks?assignee=" + zoe)
	require.NotContains(t, body, "Nobody&#39;s task", "filtered by the worker")

	// Suggestions: at most 20, by name or email prefix, ignoring case.
	suggest := func(field, text string) string {
		resp, body := s.get("/workers/suggestions?" + url.Values{"field": {field}, field: {text}}.Encode())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return body
	}
	require.Len(t, options.FindAllString(suggest("assignee", "bulk"), -1), 20)
	require.Equal(t, `<option value="Zoe Zimmer &lt;zoe@example.com&gt;"></option>`, suggest("task.assigned_to", "zO"))
	require.Contains(t, suggest("worker", "yann@"), "Yann Young")
	require.Empty(t, suggest("worker", ""))
	patSuggests := suggest("worker", "pat@example.com")
	require.Len(t, options.FindAllString(patSuggests, -1), 20)
	require.Contains(t, patSuggests, `<option value="Patricia Zed &lt;pat@example.com&gt;"></option>`, "the exact email first")

	// Typed: a suggestion, an email, a name; the filter carries the id on.
	_, body = s.get("/tasks?" + url.Values{"assignee": {"Zoe Zimmer <zoe@example.com>"}}.Encode())
	require.Contains(t, body, "Zoe&#39;s task")
	require.NotContains(t, body, "Nobody&#39;s task")
	require.Contains(t, body, `hx-get="/tasks?assignee=`+zoe+`"`, "the live refresh filters by the id")
	resp, body := s.get("/events?worker=zoe@example.com")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `data-tail="worker_id=`+zoe+`"`)
	resp, _ = s.post("/tasks/"+free.ID+"/assign", url.Values{"_csrf": {token}, "assigned_to": {"Yann Young <yann@example.com>"}, "reason": {"typed"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got, err := s.db.GetTask(s.ctx, s.db.Pool(), free.ID)
	require.NoError(t, err)
	require.Equal(t, yann, *got.AssignedTo)
	resp, _ = s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"For Yann"}, "p.days": {"2"}, "assigned_to": {"yann young"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got, err = s.db.GetTask(s.ctx, s.db.Pool(), strings.TrimPrefix(resp.Header.Get("Location"), "/tasks/"))
	require.NoError(t, err)
	require.Equal(t, yann, *got.AssignedTo)
	resp, _ = s.post("/tasks/"+free.ID+"/assign", url.Values{"_csrf": {token}, "assigned_to": {"pat@example.com"}, "reason": {"typed"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got, err = s.db.GetTask(s.ctx, s.db.Pool(), free.ID)
	require.NoError(t, err)
	require.Equal(t, pat, *got.AssignedTo, "an exact email beside more names that start with it than one read holds")

	// Refused at the field, with what was typed kept: no such worker, a
	// name two workers share.
	for _, c := range []struct{ typed, says string }{
		{"Nobody Here", `no worker is named &#34;Nobody Here&#34;`},
		{"Sam Same", `2 workers are named &#34;Sam Same&#34;`},
		{"Many Same", `20 or more workers are named &#34;Many Same&#34;`},
	} {
		resp, body = s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"X"}, "p.days": {"2"}, "assigned_to": {c.typed}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, c.typed)
		require.Contains(t, body, c.says)
		require.Regexp(t, `id="assigned_to"[^>]*value="`+c.typed+`"[^>]*aria-invalid="true"`, body)
		form := url.Values{"_csrf": {token}, "name": {"Bad"}, "task.task_type_id": {tt.ID}, "task.title": {"T"}, "task.params": {`{"days":1}`},
			"task.priority": {"low"}, "task.assigned_to": {c.typed}, "interval.every": {"1"}, "interval.unit": {"days"}, "time_zone": {"UTC"}}
		resp, body = s.post("/schedules/"+sched.ID, form)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, c.typed)
		require.Regexp(t, `id="f-task-assigned_to"[^>]*value="`+c.typed+`"[^>]*aria-invalid="true"`, body)
		require.Contains(t, body, c.says)
	}
	resp, body = s.post("/tasks/"+zoeTask.ID+"/assign", url.Values{"_csrf": {token}, "assigned_to": {"bulk"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="assign-worker"[^>]*aria-invalid="true"`, body)
	resp, body = s.post("/tasks/"+zoeTask.ID+"/assign", url.Values{"_csrf": {token}, "assigned_to": {"zoe\x00\xff"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "assigned_to: is not a worker&#39;s name or email")
	require.Empty(t, suggest("worker", "zo\x00"))
	resp, body = s.get("/tasks?assignee=nobody")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "assignee: no worker is named")
}
