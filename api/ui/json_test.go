package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// storeDeepJSON writes, through the store alone (as a release before the
// depth bound could), a result depth levels deep on a task held by a new
// worker, and heartbeat metadata as deep on that worker.
func (s *site) storeDeepJSON(taskID string, depth int) (workerID, result string) {
	s.t.Helper()
	w, err := s.db.CreateUser(s.ctx, events.UserRegistered{Email: "deep@example.com", FullName: "Deep", IsWorker: true, MaxConcurrentTasks: 1},
		"deep-password", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(s.t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	result = strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
	_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), taskID, meta, func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) })
	require.NoError(s.t, err)
	_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), taskID, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.PostResult(w.ID, json.RawMessage(result))
	})
	require.NoError(s.t, err)
	_, err = s.db.Heartbeat(s.ctx, w.ID, store.HeartbeatParams{Status: "working", Metadata: json.RawMessage(`{"m":` + result + `}`)}, meta)
	require.NoError(s.t, err)
	return w.ID, result
}

// Deep JSON stored before the depth bound keeps every page that shows it
// small (json.Indent made an 18 KB result 9,000 deep a 324 MB page); the
// page says it cut the value and links to the whole, which downloads as an
// attachment no browser runs.
func TestDeepJSONStoredEarlier(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	_, task := s.seed()
	workerID, result := s.storeDeepJSON(task.ID, 3000)

	// (The events page shares the task page's timeline rows; it may not
	// list these events yet, while another transaction holds the horizon.)
	for _, path := range []string{"/tasks/" + task.ID, "/workers", "/events"} {
		resp, body := s.get(path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Less(t, len(body), 512<<10, "%s is %d bytes", path, len(body))
		if path != "/events" {
			require.Contains(t, body, "Truncated: the first", path)
		}
	}
	_, body := s.get("/tasks/" + task.ID)
	require.Contains(t, body, `href="/tasks/`+task.ID+`/result.json"`)
	_, body = s.get("/workers")
	require.Contains(t, body, `href="/workers/`+workerID+`/metadata.json"`)

	for path, want := range map[string]string{
		"/tasks/" + task.ID + "/result.json":      result,
		"/tasks/" + task.ID + "/params.json":      `{"days": 3}`,
		"/workers/" + workerID + "/metadata.json": `{"m": ` + result + `}`,
	} {
		resp, body := s.get(path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, want, body, path)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment; filename=")
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		require.Equal(t, "default-src 'none'; sandbox", resp.Header.Get("Content-Security-Policy"))
	}
	resp, _ := s.get("/tasks/not-a-task/result.json")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	s.http.Jar.SetCookies(mustURL(s.url), []*http.Cookie{{Name: "task_session", Value: "", MaxAge: -1}})
	resp, _ = s.get("/tasks/" + task.ID + "/result.json")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "logged out: to the login page")
}

// The admin UI's JSON fields are checked as the API checks JSON: too deep
// or a lone surrogate is the field's error, and nothing is created.
func TestFormJSONIsChecked(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	token := s.csrf()
	deep := strings.Repeat("[", 65) + strings.Repeat("]", 65)
	for _, c := range []struct{ schema, want string }{
		{`{"type":"object","x":` + deep + `}`, "nests deeper than 64 levels"},
		{`{"type":"object","description":"\ud800"}`, "lone UTF-16 surrogate"},
		{`{"type":"object","type":"array"}`, "is given twice"},
	} {
		resp, body := s.post("/types/new", url.Values{"_csrf": {token}, "name": {"deep"}, "param_schema": {c.schema}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		require.Contains(t, body, c.want)
	}
	_, body := s.get("/types")
	require.NotContains(t, body, ">deep<")
}
