package ui_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The task page lists the task's data; each file downloads with the
// session cookie alone.
func TestTaskPageListsAndDownloadsData(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	_, task := s.seed()
	_, body := s.get("/tasks/" + task.ID)
	require.Contains(t, body, "No data uploaded.")

	w, err := s.db.CreateUser(s.ctx, events.UserRegistered{Email: "crawler@example.com", FullName: "Crawler", IsWorker: true, MaxConcurrentTasks: 1},
		"crawler-password", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), task.ID, meta, func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) })
	require.NoError(t, err)
	content := `{"id":1}` + "\n"
	key := events.DataKey(task.ID, "posts", "nvda.jsonl")
	obj, err := s.data.Create(s.ctx, key, "application/x-ndjson")
	require.NoError(t, err)
	_, err = io.WriteString(obj, content)
	require.NoError(t, err)
	d, err := s.db.RecordDataUpload(s.ctx, store.DataUpload{TaskID: task.ID, WorkerID: w.ID, DataType: "posts", Filename: "nvda.jsonl",
		Key: key, Size: int64(len(content)), SHA256: strings.Repeat("ab", 32), ContentType: "application/x-ndjson",
		NewID: uuid.Must(uuid.NewV7()).String()}, meta, obj.Commit)
	require.NoError(t, err)

	resp, body := s.get("/tasks/" + task.ID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	link := "/api/v1/admin/workers/tasks/" + task.ID + "/data/" + d.ID
	require.Contains(t, body, `href="`+link+`"`)
	require.Contains(t, body, "nvda.jsonl")
	require.Contains(t, body, "9 B")

	resp, got := s.get(link)
	require.Equal(t, http.StatusOK, resp.StatusCode, got)
	require.Equal(t, content, got)
	require.Contains(t, resp.Header.Get("Content-Disposition"), "nvda.jsonl")

	// Without the cookie: 401.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, s.url+link, nil)
	r2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r2.Body.Close()
	require.Equal(t, http.StatusUnauthorized, r2.StatusCode)
}
