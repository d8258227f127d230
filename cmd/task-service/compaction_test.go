package main_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// History from three days ago, and the real binary with EVENT_RETENTION=1d:
// it archives the old periods into DATA_DIR and compacts the finished task
// to one task.compacted event, whose timeline entry says what was kept,
// and leaves the open one alone. taskctl replay --verify stays clean, the
// archive verifies, the archive plus the live log folds to the live
// projections, and an object with one byte changed is refused by name,
// with exit status 1, by verify and by the replay from the archive.
func TestCompactionThroughTheBinaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	dataDir := t.TempDir()
	done, open := seedOldHistory(ctx, t, dbURL, time.Now().Add(-72*time.Hour))

	s := startServer(t, dbURL, "DATA_DIR="+dataDir, "EVENT_RETENTION=1d", "EVENT_COMPACTION_INTERVAL=1s")
	admin := client.New(s.base, checkedHTTP(t, s.base, nil))
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	var timeline []client.Event
	for deadline := time.Now().Add(time.Minute); ; {
		timeline, err = admin.TaskEvents(ctx, done)
		require.NoError(t, err)
		if len(timeline) == 1 && timeline[0].Type == "task.compacted" {
			break
		}
		require.False(t, time.Now().After(deadline), "not compacted: %d events; logs:\n%s", len(timeline), s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	sum := timeline[0].Summary
	for _, part := range []string{"compacted 8 events", "events/day/", "final state completed", "1 attempts: Old Worker completed in",
		"result size", "usage 1 reports, 150 tokens", "dropped params", "1 thread messages"} {
		require.Contains(t, sum, part)
	}
	task, err := admin.Task(ctx, done)
	require.NoError(t, err)
	require.Equal(t, "completed", string(task.Status))
	openEvents, err := admin.TaskEvents(ctx, open)
	require.NoError(t, err)
	require.Equal(t, "task.created", openEvents[0].Type, "an open task keeps its events")
	for deadline := time.Now().Add(time.Minute); !strings.Contains(s.logs.String(), `"tasks":1,`); {
		require.False(t, time.Now().After(deadline), "the compaction's progress is not in the logs:\n%s", s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}

	// The UI's task page says it was compacted and what was kept; the
	// state at a time before its last change is the archive's to tell.
	cookie, _ := loginCookie(t, s.base)
	req, err := http.NewRequest(http.MethodGet, s.base+"/tasks/"+done, nil)
	require.NoError(t, err)
	req.Header.Set("Cookie", strings.Split(cookie, ";")[0])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `id="task-compacted"`)
	require.Contains(t, string(page), "final state completed")
	req.URL.RawQuery = "at=" + task.CreatedAt.Add(time.Second).Format(time.RFC3339Nano)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(page), "was compacted past the event retention")

	taskctl := buildBinary(t, "taskctl")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(taskctl, args...)
		cmd.Env = baseEnv("DATABASE_URL="+dbURL, "DATA_DIR="+dataDir)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	out, code := run("replay", "--verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "No differences")
	out, code = run("events", "archive", "verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "archive objects match their manifests")
	out, code = run("replay", "--from-archive", "--verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "No differences")

	// One byte changed in the object that holds the task's events (its
	// timeline names it).
	key := regexp.MustCompile(`events/day/[0-9-]+\.jsonl\.gz`).FindString(sum)
	require.NotEmpty(t, key, sum)
	tampered := filepath.Join(dataDir, filepath.FromSlash(key))
	b, err := os.ReadFile(tampered)
	require.NoError(t, err)
	b[len(b)-10] ^= 0x01 // in the gzip trailer's CRC: the events still parse, the hash does not match
	require.NoError(t, os.WriteFile(tampered, b, 0o600))
	out, code = run("events", "archive", "verify")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, key)
	require.Contains(t, out, "does not match its manifest")
	out, code = run("replay", "--from-archive", "--verify")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, key)
}

// seedOldHistory writes, through the store with its clock at at, a worker's
// task that went through everything a compaction drops or keeps, and an
// open task; it returns their ids.
func seedOldHistory(ctx context.Context, t *testing.T, dbURL string, at time.Time) (done, open string) {
	t.Helper()
	pool, err := store.Connect(ctx, dbURL, 2)
	require.NoError(t, err)
	defer pool.Close()
	var mu sync.Mutex
	tick := func() time.Time { // a second a call: the history has an order
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(time.Second)
		return at
	}
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: tick})
	require.NoError(t, err)
	sys := events.Meta{Actor: events.System("test")}
	w, err := db.CreateUser(ctx, events.UserRegistered{Email: "old@example.com", FullName: "Old Worker", IsWorker: true,
		MaxConcurrentTasks: 2}, "worker-password", "x", sys)
	require.NoError(t, err)
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl", SOP: "Crawl it."}, sys)
	require.NoError(t, err)
	wm := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	tk, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: "old crawl", Params: []byte(`{"url": "https://example.com/old"}`), AssignedTo: w.ID}}, sys)
	require.NoError(t, err)
	steps := []store.TaskDecision{
		func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) },
		func(t *events.Task) ([]events.Payload, error) {
			return t.PostUpdate(uuid.NewString(), w.ID, "half way", true)
		},
		func(t *events.Task) ([]events.Payload, error) { return t.PostResult(w.ID, []byte(`{"pages": 3}`)) },
	}
	for _, step := range steps {
		_, _, err = db.UpdateTask(ctx, db.Pool(), tk.ID, wm, step)
		require.NoError(t, err)
	}
	_, err = db.SaveTaskCheckpoint(ctx, tk.ID, w.ID, []byte(`{"page": 2}`), wm)
	require.NoError(t, err)
	_, _, err = db.ReportUsage(ctx, tk.ID, w.ID, events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 100, OutputTokens: 50}, wm)
	require.NoError(t, err)
	_, _, err = db.CompleteTask(ctx, tk.ID, w.ID, wm)
	require.NoError(t, err)
	op, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: "still waiting"}}, sys)
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1`, tk.ID).Scan(&n))
	require.Equal(t, 8, n, strings.Repeat("-", 3))
	return tk.ID, op.ID
}
