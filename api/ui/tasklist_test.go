package ui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

// The task list shows each task's attempt, start and run time, and takes a
// page size the pager keeps; a page size is not a filter to act on.
func TestTaskListColumnsAndPageSize(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	_, task := s.seed() // three tasks
	w, err := s.db.CreateUser(s.ctx, events.UserRegistered{Email: "w@example.com", FullName: "W", IsWorker: true, MaxConcurrentTasks: 1},
		"w-password-123", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	for _, step := range []func(t *events.Task) ([]events.Payload, error){
		func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) },
		func(t *events.Task) ([]events.Payload, error) { return t.Complete(w.ID) },
	} {
		_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), task.ID, meta, step)
		require.NoError(t, err)
	}

	resp, body := s.get("/tasks")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, ">Attempt</th>")
	for _, th := range []string{"Started", "Duration"} {
		require.Contains(t, body, ">"+th+"</a></th>")
	}
	row := regexp.MustCompile(`(?s)<tr>\s*<td><input[^>]*value="` + task.ID + `".*?</tr>`).FindString(body)
	require.NotEmpty(t, row)
	require.Regexp(t, `<td class="hide-narrow">1</td>`, row, "the first attempt")
	require.Regexp(t, `<td class="hide-narrow">\d+(\.\d+)?(ms|µs|s)</td>`, row, "started to completed")
	require.Equal(t, 3, strings.Count(body, `name="id"`))

	resp, body = s.get("/tasks?limit=25")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<option value="25" selected>`)
	require.NotContains(t, body, `id="act-on-all"`, "a page size alone filters nothing")
	resp, body = s.get("/tasks?limit=7")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "must be 25, 50, 100 or 200")
}

// The task list sorts by created time either way, by start and by run
// time, from a menu and from the column headings; the order and the page
// size survive paging and the live refresh; a bad order, or one no index
// serves with the filters given, is a 400 naming the sort.
func TestTaskListSorts(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	tt, _ := s.seed()
	w, err := s.db.CreateUser(s.ctx, events.UserRegistered{Email: "w@example.com", FullName: "W", IsWorker: true, MaxConcurrentTasks: 30},
		"w-password-123", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	// Three runs: "run 1" started first and ran 3 s, "run 2" 1 s, "run 3"
	// started last and ran 2 s.
	var runs []string
	for i, d := range []int{3, 1, 2} {
		task, _, err := s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: fmt.Sprintf("run %d", i+1), TaskTypeID: tt.ID,
			Params: json.RawMessage(`{"days":3}`)}, s.admin)
		require.NoError(t, err)
		for _, step := range []func(t *events.Task) ([]events.Payload, error){
			func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) },
			func(t *events.Task) ([]events.Payload, error) { return t.Complete(w.ID) },
		} {
			_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), task.ID, meta, step)
			require.NoError(t, err)
		}
		_, err = s.db.Pool().Exec(s.ctx, `UPDATE worker_tasks SET started_at = now() - make_interval(hours => 3 - $2),
			completed_at = now() - make_interval(hours => 3 - $2) + make_interval(secs => $3) WHERE id = $1`, task.ID, i, d)
		require.NoError(t, err)
		runs = append(runs, task.ID)
	}
	order := func(body string) []string {
		var ids []string
		for _, m := range regexp.MustCompile(`name="id" value="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	resp, body := s.get("/tasks?sort=longest")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, []string{runs[0], runs[2], runs[1]}, order(body), "the ended runs, longest first")
	require.Contains(t, body, `<option value="longest" selected>`)
	require.Regexp(t, `<th class="hide-narrow" aria-sort="descending"><a [^>]*>Duration</a>`, body)
	require.Contains(t, body, `hx-get="/tasks?sort=longest"`, "the live refresh keeps the order")
	_, body = s.get("/tasks?sort=started")
	require.Equal(t, []string{runs[2], runs[1], runs[0]}, order(body), "latest start first")
	_, body = s.get("/tasks?sort=oldest")
	ids := order(body)
	require.Len(t, ids, 6)
	require.Equal(t, runs, ids[3:], "created, oldest first")
	require.Contains(t, body, `<a href="/tasks?sort=newest" title="sort by created time">Created</a>`, "the heading turns the order around")
	_, body = s.get("/tasks?status=completed")
	require.Contains(t, body, `<a href="/tasks?sort=longest&amp;status=completed" title="sort by run time, longest first">Duration</a>`,
		"a heading keeps the filter")

	// Paging keeps the order and the page size.
	for i := range 25 {
		_, _, err := s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: fmt.Sprintf("later %d", i), TaskTypeID: tt.ID,
			Params: json.RawMessage(`{"days":3}`)}, s.admin)
		require.NoError(t, err)
	}
	_, body = s.get("/tasks?sort=oldest&limit=25")
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">`).FindStringSubmatch(body)
	require.NotNil(t, next)
	nextURL := strings.ReplaceAll(next[1], "&amp;", "&")
	require.Contains(t, nextURL, "sort=oldest")
	require.Contains(t, nextURL, "limit=25")
	cursor := mustURL(nextURL).Query().Get("after")
	resp, body = s.get(nextURL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, order(body), 6, "31 tasks, 25 a page")
	require.Contains(t, body, "later 24")
	require.Contains(t, body, `<a href="/tasks?limit=25&amp;sort=oldest">First page</a>`)

	for path, msg := range map[string]string{
		"/tasks?sort=bogus":                   "must be newest, oldest, started or longest",
		"/tasks?sort=":                        "",
		"/tasks?sort=started&type=" + tt.ID:   "combines with the status filter only",
		"/tasks?sort=longest&q=run":           "combines with the status filter only",
		"/tasks?sort=longest&status=pending":  "lists tasks that are completed, failed or cancelled, not pending ones",
		"/tasks?sort=oldest&after=" + cursor:  "",
		"/tasks?sort=started&after=" + cursor: "not a cursor from this list",
		"/tasks?after=" + cursor:              "not a cursor from this list",
	} {
		resp, body := s.get(path)
		if msg == "" {
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
			continue
		}
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		require.Contains(t, body, msg, path)
	}
}
