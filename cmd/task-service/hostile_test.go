package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// Hostile input at the binary's edge: what a client may send is bounded,
// and what it uploaded never runs in an admin's browser.

// emptyFiles is a multipart body of n zero-byte files named f<i>.txt.
func emptyFiles(t *testing.T, n int) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	require.NoError(t, mw.WriteField("data_type", "empty"))
	for i := range n {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="f%d.txt"`, i))
		_, err := mw.CreatePart(h)
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	return &buf, mw.FormDataContentType()
}

// uploadParts sends a multipart body to the task's data route.
func uploadParts(t *testing.T, wc *client.Client, base, taskID string, body *bytes.Buffer, ct string) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/worker/tasks/"+taskID+"/data", body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", ct)
	return wc.SendRaw(req, nil)
}

// TestUploadFileCountBounds: one request of 3,000 empty files stores 100
// and is refused with a 413 naming the bound; the task stops at
// DATA_MAX_FILES_PER_TASK files, empty ones counted, while a name it has
// can still be replaced.
func TestUploadFileCountBounds(t *testing.T) {
	t.Parallel()
	env, _ := dataEnv(t, "filesystem")
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL, append(env, "DATA_MAX_FILES_PER_TASK=150")...)
	wc, taskID := dataTask(t, s)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	uploaded := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1 AND type = 'task.data_uploaded'`, taskID).Scan(&n))
		return n
	}

	body, ct := emptyFiles(t, 3000)
	err = uploadParts(t, wc, s.base, taskID, body, ct)
	require.True(t, client.IsStatus(err, http.StatusRequestEntityTooLarge), "%v", err)
	require.Contains(t, err.Error(), "a request may carry at most 100 files (the first 100 were stored)")
	require.Equal(t, 100, uploaded())

	body, ct = emptyFiles(t, 3000) // f0..f99 replace, f100..f149 are new
	err = uploadParts(t, wc, s.base, taskID, body, ct)
	require.True(t, client.IsStatus(err, http.StatusRequestEntityTooLarge), "%v", err)
	require.Equal(t, 200, uploaded())

	var more bytes.Buffer
	mw := multipart.NewWriter(&more)
	require.NoError(t, mw.WriteField("data_type", "more"))
	for i := range 60 {
		_, err := mw.CreateFormFile("file", fmt.Sprintf("m%d.txt", i))
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	err = uploadParts(t, wc, s.base, taskID, &more, mw.FormDataContentType())
	require.True(t, client.IsStatus(err, http.StatusRequestEntityTooLarge), "%v", err)
	require.Contains(t, err.Error(), "the task has 150 files, at most 150 per task (DATA_MAX_FILES_PER_TASK)")
	require.Equal(t, 250, uploaded(), "50 new files filled the task")

	_, err = wc.UploadData(ctx, taskID, "raw", "one-more.txt", "", bytes.NewReader(nil), 0)
	require.True(t, client.IsStatus(err, http.StatusRequestEntityTooLarge), "%v", err)
	require.Contains(t, err.Error(), "DATA_MAX_FILES_PER_TASK")
	_, err = wc.UploadData(ctx, taskID, "empty", "f7.txt", "", bytes.NewReader([]byte("now with content")), -1)
	require.NoError(t, err, "a name the task has is replaced, not counted again")
	var files int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM task_data WHERE task_id = $1`, taskID).Scan(&files))
	require.Equal(t, 150, files)
}

// TestDownloadsNeverRun: whatever type a worker gave its upload, both
// download routes serve it as an attachment that no browser runs: active
// types (JavaScript, HTML, SVG, XML, CSS) become application/octet-stream,
// passive ones stay; and in Chromium, a same-origin page that loads the
// upload sent as application/javascript with <script src> does not run it.
func TestDownloadsNeverRun(t *testing.T) {
	t.Parallel()
	env, _ := dataEnv(t, "filesystem")
	s := startServer(t, storetest.NewDB(t), env...)
	wc, taskID := dataTask(t, s)
	ctx := context.Background()
	admin := client.New(s.base, nil)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)

	uploads := []struct{ name, sent, served string }{
		{"evil.js", "application/javascript", "application/octet-stream"},
		{"evil.mjs", "text/javascript; charset=utf-8", "application/octet-stream"},
		{"page.html", "text/html", "application/octet-stream"},
		{"pic.svg", "image/svg+xml", "application/octet-stream"},
		{"feed.xml", "text/xml", "application/octet-stream"},
		{"page.xhtml", "application/xhtml+xml", "application/octet-stream"},
		{"look.css", "text/css", "application/octet-stream"},
		{"odd.bin", "not a type", "application/octet-stream"},
		{"notes.txt", "text/plain; charset=utf-8", "text/plain; charset=utf-8"},
		{"data.json", "application/json", "application/json"},
		{"pic.png", "image/png", "image/png"},
	}
	ids := map[string]string{}
	for _, u := range uploads {
		d, err := wc.UploadData(ctx, taskID, "files", u.name, u.sent, bytes.NewReader([]byte("window.pwned = 1;")), -1)
		require.NoError(t, err, u.name)
		ids[u.name] = d.ID
	}
	for _, u := range uploads {
		for _, who := range []struct {
			c    *client.Client
			path string
		}{{admin, client.AdminDataPath(taskID, ids[u.name])}, {wc, client.WorkerDataPath(taskID, ids[u.name])}} {
			req, err := http.NewRequest(http.MethodGet, s.base+who.path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+who.c.Token())
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", who.path, body)
			require.Equal(t, u.served, resp.Header.Get("Content-Type"), u.name)
			require.Equal(t, `attachment; filename=`+u.name, resp.Header.Get("Content-Disposition"), u.name)
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), u.name)
			require.Equal(t, "default-src 'none'; sandbox", resp.Header.Get("Content-Security-Policy"), u.name)
		}
	}

	b := newBrowser(t)
	b.login(s.base, "/tasks/"+taskID)
	b.expect("Refused to execute script")
	var outcome string
	b.run(chromedp.Evaluate(fmt.Sprintf(`new Promise(done => {
		const s = document.createElement('script');
		s.src = %q;
		s.onload = () => done('loaded');
		s.onerror = () => done('refused');
		document.head.appendChild(s);
	})`, client.AdminDataPath(taskID, ids["evil.js"])), &outcome, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	}))
	var ran bool
	b.run(chromedp.Evaluate(`window.pwned === 1`, &ran))
	require.False(t, ran, "the upload ran as a script on the admin's page (%s)", outcome)
	require.Equal(t, "refused", outcome)
	b.checkConsole()
}

// TestDeepJSONPagesStayBounded: a result nested 9,000 deep and 16 KiB of
// heartbeat metadata nested 8,000 deep made /tasks/:id a 324 MB page (the
// server went to 1.9 GB) and /workers 128 MB. The API now refuses them;
// written straight to the database, as a release without the depth bound
// stored them, both pages stay small while the server's resident memory
// stays under 300 MB, and the whole result still downloads.
func TestDeepJSONPagesStayBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL)
	wc, taskID := dataTask(t, s)
	admin := client.New(s.base, nil)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	mine, err := wc.MyTasks(ctx, false)
	require.NoError(t, err)
	require.Len(t, mine, 1)
	workerID := *mine[0].AssignedTo

	// The API refuses such JSON now, naming the field, before parsing it;
	// and a lone surrogate in a plain string as in free-form JSON.
	result := strings.Repeat("[", 9000) + "1" + strings.Repeat("]", 9000)
	metadata := `{"m":` + strings.Repeat("[", 8000) + strings.Repeat("]", 8000) + `}`
	for _, c := range []struct{ path, body, field string }{
		{"/api/v1/worker/tasks/" + taskID + "/result", `{"result":` + result + `}`, "result"},
		{"/api/v1/worker/heartbeat", `{"metadata":` + metadata + `}`, "metadata"},
		{"/api/v1/worker/tasks/" + taskID + "/updates", `{"message":"half a pair: \ud83d"}`, "message"},
	} {
		err := wc.Do(ctx, http.MethodPost, c.path, json.RawMessage(c.body), nil)
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr, c.path)
		require.Equal(t, http.StatusBadRequest, apiErr.Status, c.path)
		require.Equal(t, c.field, apiErr.Field, c.path)
	}
	detail, err := admin.Task(ctx, taskID)
	require.NoError(t, err)
	require.Equal(t, "null", string(detail.Result))
	require.Empty(t, detail.Updates)

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: workerID}}
	_, _, err = db.UpdateTask(ctx, pool, taskID, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.PostResult(workerID, json.RawMessage(result))
	})
	require.NoError(t, err)
	_, err = db.Heartbeat(ctx, workerID, store.HeartbeatParams{Status: "working", Metadata: json.RawMessage(metadata)}, meta)
	require.NoError(t, err)

	get := func(path string) (int, []byte, error) {
		req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
		if err != nil {
			return 0, nil, err
		}
		req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: admin.Token()})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	pid := s.cmd.Process.Pid
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			if r := rss(t, pid); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	type page struct {
		path   string
		status int
		body   []byte
		err    error
	}
	pages := make([]page, 8)
	var wg sync.WaitGroup
	for i := range pages {
		pages[i].path = map[bool]string{true: "/tasks/" + taskID, false: "/workers"}[i%2 == 0]
		wg.Add(1)
		go func() {
			defer wg.Done()
			pages[i].status, pages[i].body, pages[i].err = get(pages[i].path)
		}()
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	t.Logf("server resident memory peak %d MB", peak.Load()>>20)
	for _, p := range pages {
		require.NoError(t, p.err, p.path)
		require.Equal(t, http.StatusOK, p.status, p.path)
		t.Logf("%s: %d bytes", p.path, len(p.body))
		require.Less(t, len(p.body), 1<<20, "%s: a page of a megabyte or more", p.path)
		require.Contains(t, string(p.body), "Truncated: the first", p.path)
	}
	require.Less(t, peak.Load(), int64(300<<20), "the server's resident memory reached 300 MB")

	status, body, err := get("/tasks/" + taskID + "/result.json")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, result, string(body), "the whole result downloads")
}
