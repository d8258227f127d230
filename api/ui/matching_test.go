package ui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

// A filtered list leads to acting on every task it matches: the confirm
// step shows the count and the filter, the form needs the CSRF token, the
// Origin and (for a cancel) a reason, and the result says what was done.
func TestActOnAllMatchingTasks(t *testing.T) {
	s := newSite(t)
	tt, _ := s.seed() // two reports and "Crawl NVDA"
	for i := range 7 {
		_, _, err := s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: fmt.Sprintf("Crawl AMD %d", i), TaskTypeID: tt.ID,
			Params: json.RawMessage(`{"days":1}`)}, s.admin)
		require.NoError(t, err)
	}
	s.login()
	statuses := func() map[events.Status]int {
		var out = map[events.Status]int{}
		rows, err := s.db.Pool().Query(s.ctx, `SELECT status, count(*) FROM worker_tasks GROUP BY status`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var st events.Status
			var n int
			require.NoError(t, rows.Scan(&st, &n))
			out[st] = n
		}
		return out
	}

	_, body := s.get("/tasks")
	require.NotContains(t, body, "Cancel all matching", "an unfiltered list offers no act-on-all")
	_, body = s.get("/tasks?q=crawl&after=")
	require.Contains(t, body, `href="/tasks/matching?action=cancel&amp;q=crawl"`)
	require.Contains(t, body, `href="/tasks/matching?action=retry&amp;q=crawl"`)

	resp, body := s.get("/tasks/matching?action=cancel&q=crawl")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "<strong>8 tasks</strong> match this filter and will be cancelled")
	require.Contains(t, body, "<dt>Title contains</dt><dd>crawl</dd>")
	require.Contains(t, body, "Cancel 8 tasks")
	_, body = s.get("/tasks/matching?action=retry&q=crawl")
	require.Contains(t, body, "No task matching this filter can be retried")

	form := url.Values{"action": {"cancel"}, "filter": {"q=crawl"}, "reason": {"crawler retired"}}
	resp, _ = s.post("/tasks/matching", form)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	form.Set("_csrf", s.csrf())
	resp, _ = s.post("/tasks/matching", form, "Origin", "https://evil.example.com")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another site")
	noReason := url.Values{"_csrf": form["_csrf"], "action": {"cancel"}, "filter": {"q=crawl"}}
	resp, body = s.post("/tasks/matching", noReason)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "reason: is required")
	require.Contains(t, body, "<strong>8 tasks</strong>", "the confirm step again, with its count")
	resp, _ = s.post("/tasks/matching", url.Values{"_csrf": form["_csrf"], "action": {"cancel"}, "filter": {""}, "reason": {"all"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "an empty filter")
	resp, _ = s.post("/tasks/matching", url.Values{"_csrf": form["_csrf"], "action": {"delete"}, "filter": {"q=crawl"}, "reason": {"x"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, map[events.Status]int{events.StatusPending: 10}, statuses(), "refused requests changed nothing")

	resp, body = s.post("/tasks/matching", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Cancel: 8 tasks cancelled; 0 skipped")
	require.Equal(t, map[events.Status]int{events.StatusPending: 2, events.StatusCancelled: 8}, statuses())
}
