package ui_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// The task page shows the latest checkpoint of the task's chain: its size,
// when and by whom it was saved, how many saves, and the JSON; a retry's
// page says it comes from an earlier attempt.
func TestTaskPageShowsTheCheckpoint(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	_, task := s.seed()
	_, body := s.get("/tasks/" + task.ID)
	require.Contains(t, body, "None saved.")

	w, err := s.db.CreateUser(s.ctx, events.UserRegistered{Email: "agent@example.com", FullName: "Agent Smith", IsWorker: true, MaxConcurrentTasks: 1},
		"agent-password", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), task.ID, meta, func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) })
	require.NoError(t, err)
	for _, state := range []string{`{"session_id":"first"}`, `{"session_id":"sess-<42>","turns":7}`} {
		_, err = s.db.SaveTaskCheckpoint(s.ctx, task.ID, w.ID, json.RawMessage(state), meta)
		require.NoError(t, err)
	}

	resp, body := s.get("/tasks/" + task.ID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	panel := checkpointPanel(t, body)
	require.NotContains(t, panel, "None saved.")
	require.Contains(t, panel, "<dt>Size</dt><dd>36 B</dd>", "the compact size")
	require.Contains(t, panel, "<dt>By</dt><dd>Agent Smith</dd>")
	require.Contains(t, panel, "<dt>Saves</dt><dd>2</dd>")
	require.Contains(t, panel, "&#34;session_id&#34;: &#34;sess-&lt;42&gt;&#34;", "the state, escaped")
	require.NotContains(t, panel, "first", "only the latest state")
	require.Contains(t, body, "checkpoint saved by Agent Smith (36 B)", "the timeline's summary")

	_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), task.ID, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Fail(w.ID, events.FailureError, "context window full", nil)
	})
	require.NoError(t, err)
	retry, err := s.srv.RetryTask(s.ctx, task.ID, "", s.admin)
	require.NoError(t, err)
	_, body = s.get("/tasks/" + retry.ID)
	panel = checkpointPanel(t, body)
	require.Contains(t, panel, "sess-&lt;42&gt;")
	require.Contains(t, panel, `<a href="/tasks/`+task.ID+`">an earlier attempt</a>`)
}

// checkpointPanel is the task page's checkpoint part.
func checkpointPanel(t *testing.T, body string) string {
	t.Helper()
	_, rest, found := strings.Cut(body, `<div id="task-checkpoint">`)
	require.True(t, found, "no checkpoint panel")
	panel, _, _ := strings.Cut(rest, "</div>")
	return panel
}
