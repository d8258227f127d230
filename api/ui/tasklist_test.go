package ui_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
	for _, th := range []string{"Attempt", "Started", "Duration"} {
		require.Contains(t, body, ">"+th+"</th>")
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
