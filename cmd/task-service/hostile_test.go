package main_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
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
