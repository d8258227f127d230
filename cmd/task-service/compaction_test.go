package main_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/storetest"
	"github.com/clawdbot/task-service/store/whatif"
)

// History from three days ago, and the real binary with EVENT_RETENTION=1d,
// on the filesystem (DATA_DIR) and on S3 (DATA_S3_BUCKET, the test's
// versitygw). An object with a manifest whose hash is wrong, there before
// the service (a crash between the object and its row, then a change), is
// refused: the service logs it by name and writes nothing (no archive row,
// no compaction). Once it is gone, the service archives the old periods
// into the store and compacts the finished task to one task.compacted
// event, whose timeline entry says what was kept, and leaves the open one
// alone. taskctl replay --verify stays clean, taskctl events archive
// verify reads every object back from the store, the archive plus the live
// log folds to the live projections, and an object with one byte changed
// is refused by name, with exit status 1, by verify and by the replay from
// the archive, which writes nothing (its scratch schema is the one the
// clean load left).
func TestCompactionThroughTheBinaries(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"filesystem", "s3"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testCompactionThroughTheBinaries(t, backend)
		})
	}
}

func testCompactionThroughTheBinaries(t *testing.T, backend string) {
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	env, bs := dataEnv(t, backend)
	done, open := seedOldHistory(ctx, t, dbURL, time.Now().Add(-72*time.Hour))

	// A wrong object for the period of the history, with its manifest and
	// no row in event_archives: the service must not adopt it.
	pool, err := store.Connect(ctx, dbURL, 1)
	require.NoError(t, err)
	defer pool.Close()
	var first time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(occurred_at) FROM task_events WHERE stream_id = $1`, done).Scan(&first))
	bad := archive.PeriodOf(archive.Day, first)
	putObject(t, bs, bad.Key(), gzipped(t, `{"seq": 1, "type": "task.created", "occurred_at": "`+first.UTC().Format(time.RFC3339Nano)+`"}`+"\n"))
	putObject(t, bs, bad.ManifestKey(), []byte(`{"period": "day", "start": "`+bad.Start.Format(time.DateOnly)+`", "object": "`+bad.Key()+
		`", "format": "jsonl.gz", "events": 1, "bytes": 1, "sha256": "`+strings.Repeat("0", 64)+`", "seq_lo": 1, "seq_hi": 1, "snapshot": "1:1:"}`))

	taskctl := buildBinary(t, "taskctl")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(taskctl, args...)
		cmd.Env = baseEnv(append([]string{"DATABASE_URL=" + dbURL}, env...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	// What-if replay of one more retry over the old days, from the events.
	policy := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(policy, []byte(`{"types": {"crawl": {"max_retries": 1}}}`), 0o600))
	whatIf := func() whatif.Report {
		cmd := exec.Command(taskctl, "replay", "--what-if", policy, "--since", "7d", "--json")
		cmd.Env = baseEnv("DATABASE_URL=" + dbURL)
		out, err := cmd.Output()
		require.NoError(t, err)
		var rep whatif.Report
		require.NoError(t, json.Unmarshal(out, &rep), string(out))
		return rep
	}
	fromEvents := whatIf()
	require.Equal(t, int64(1), fromEvents.Totals.Retried)
	require.Len(t, fromEvents.Sample, 1)

	s := startServer(t, dbURL, append(env, "EVENT_RETENTION=1d", "EVENT_COMPACTION_INTERVAL=1s")...)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(s.logs.String(), "does not check out"); {
		require.False(t, time.Now().After(deadline), "the wrong object is not refused:\n%s", s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, s.logs.String(), bad.Key()+": archive does not match its manifest: sha256 is ")
	var rows, left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM event_archives WHERE period_start >= $1),
		(SELECT count(*) FROM task_events WHERE stream_id = $2)`, bad.Start, done).Scan(&rows, &left))
	require.Zero(t, rows, "no archive recorded for the wrong object's period or after")
	require.Equal(t, 8, left, "nothing compacted")
	// Gone (an operator moved it aside): the next round archives the period.
	require.NoError(t, bs.Delete(ctx, bad.Key()))
	require.NoError(t, bs.Delete(ctx, bad.ManifestKey()))

	admin := s.rootAdmin(t)
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
	for deadline := time.Now().Add(time.Minute); !strings.Contains(s.logs.String(), `"tasks":2,`); {
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

	// The same what-if from the task.compacted summaries: the same report.
	fromSummaries := whatIf()
	require.Positive(t, fromSummaries.CompactedTasks)
	require.Zero(t, fromSummaries.Totals.NotJudged)
	require.Equal(t, fromEvents.Totals, fromSummaries.Totals)
	require.Equal(t, fromEvents.Types, fromSummaries.Types)
	require.Equal(t, fromEvents.Sample, fromSummaries.Sample)

	// A chain whose events are stamped in the archived period but commit
	// now (a writer whose clock is days behind): no object of the period
	// holds them, so compaction reports the period, the next round writes
	// its first supplement, and the chain is compacted against it.
	lateTask := seedLateTask(ctx, t, dbURL, open)
	var lateSum string
	for deadline := time.Now().Add(time.Minute); ; {
		timeline, err = admin.TaskEvents(ctx, lateTask)
		require.NoError(t, err)
		if len(timeline) == 1 && timeline[0].Type == "task.compacted" {
			lateSum = timeline[0].Summary
			break
		}
		require.False(t, time.Now().After(deadline), "the late chain is not compacted: %d events; logs:\n%s", len(timeline), s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	supplement := regexp.MustCompile(`events/day/[0-9-]+\.1\.jsonl\.gz`).FindString(lateSum)
	require.NotEmpty(t, supplement, lateSum)

	out, code := run("replay", "--verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "No differences")
	out, code = run("events", "archive", "verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "archive objects match their manifests")
	out, code = run("replay", "--from-archive", "--verify")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "No differences")

	out, code = run("events", "archive", "verify", "--json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"object": "`+bad.Key()+`"`, "the history's period was read back from the store")
	require.Contains(t, out, `"object": "`+supplement+`"`, "and its supplement")
	var loaded uint32
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'replay_archive.archived_events'::regclass::oid`).Scan(&loaded))

	// One byte changed in the object that holds the task's events (its
	// timeline names it).
	key := regexp.MustCompile(`events/day/[0-9-]+\.jsonl\.gz`).FindString(sum)
	require.NotEmpty(t, key, sum)
	r, err := bs.Open(ctx, key)
	require.NoError(t, err)
	gz, err := gzip.NewReader(r)
	require.NoError(t, err)
	lines, err := io.ReadAll(gz)
	r.Close()
	require.NoError(t, err)
	require.Contains(t, string(lines), `"old crawl"`)
	// The same events, one title changed, gzipped again: every line still
	// parses and the count holds; only the hash (and size) tell.
	putObject(t, bs, key, gzipped(t, strings.Replace(string(lines), `"old crawl"`, `"OLD CRAWL"`, 1)))
	out, code = run("events", "archive", "verify")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, key)
	require.Contains(t, out, "does not match its manifest: sha256 is ")
	out, code = run("replay", "--from-archive", "--verify")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, key)
	var after uint32
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'replay_archive.archived_events'::regclass::oid`).Scan(&after))
	require.Equal(t, loaded, after, "the refused load wrote nothing: the scratch table is the clean load's")
}

// putObject writes an object into the store, replacing one there.
func putObject(t *testing.T, bs blob.Store, key string, body []byte) {
	t.Helper()
	w, err := bs.Create(context.Background(), key, "application/octet-stream")
	require.NoError(t, err)
	_, err = w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Commit(context.Background()))
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	_, err := gz.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, gz.Close())
	return buf.Bytes()
}

// seedLateTask writes, through the store with its clock a minute after the
// open task's creation (days ago), a task that a worker claimed and
// completed, and returns its id: events of an old period, committed now.
func seedLateTask(ctx context.Context, t *testing.T, dbURL, open string) string {
	t.Helper()
	pool, err := store.Connect(ctx, dbURL, 2)
	require.NoError(t, err)
	defer pool.Close()
	var at time.Time
	var worker, typeID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT w.created_at, (SELECT id::text FROM users WHERE email = 'old@example.com'), w.task_type_id::text
		FROM worker_tasks w WHERE w.id = $1`, open).Scan(&at, &worker, &typeID))
	var mu sync.Mutex
	tick := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(time.Second)
		return at
	}
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: tick})
	require.NoError(t, err)
	tk, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: typeID, NewTaskParams: events.NewTaskParams{
		Title: "late crawl", AssignedTo: worker}}, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	wm := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}}
	_, _, err = db.UpdateTask(ctx, db.Pool(), tk.ID, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
	require.NoError(t, err)
	_, _, err = db.CompleteTask(ctx, tk.ID, worker, wm)
	require.NoError(t, err)
	return tk.ID
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
	// A chain its type's max_retries (0) exhausted: what-if replay's
	// "one more retry" changes it.
	failed, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: "old failure", AssignedTo: w.ID}}, sys)
	require.NoError(t, err)
	for _, step := range []store.TaskDecision{
		func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) },
		func(t *events.Task) ([]events.Payload, error) {
			return t.Fail(w.ID, events.FailureError, "tests failed", nil)
		},
	} {
		_, _, err = db.UpdateTask(ctx, db.Pool(), failed.ID, wm, step)
		require.NoError(t, err)
	}
	_, _, err = db.UpdateTask(ctx, db.Pool(), failed.ID, sys, func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(0) })
	require.NoError(t, err)
	op, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: "still waiting"}}, sys)
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1`, tk.ID).Scan(&n))
	require.Equal(t, 8, n, strings.Repeat("-", 3))
	return tk.ID, op.ID
}
