package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The HTTP edge as an attacker meets it, through the real binary: bodies
// bounded before anything parses them, metrics that clients cannot grow,
// the session cookie behind a TLS-terminating proxy, the way back after a
// login, and strict bodies everywhere.

// spoolDir is a private TMPDIR for the binary: net/http spools multipart
// file parts there, so it must stay empty.
func spoolDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "tmp")
	require.NoError(t, os.Mkdir(dir, 0o700))
	return dir
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Empty(t, names, "nothing may be spooled to TMPDIR")
}

// multipartBody is a form with an email field and a file part of size bytes.
func multipartBody(t *testing.T, size int) (body []byte, contentType string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	require.NoError(t, w.WriteField("email", "root@example.com"))
	f, err := w.CreateFormFile("file", "big.bin")
	require.NoError(t, err)
	_, err = f.Write(bytes.Repeat([]byte("x"), size))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes(), w.FormDataContentType()
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{Timeout: 60 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// post sends one request from the UI's own origin and reads the answer.
func post(t *testing.T, base, path, contentType string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, body)
	require.NoError(t, err)
	req.Header.Set("Origin", base)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(raw)
}

func TestHostileBodies(t *testing.T) {
	t.Parallel()
	spool := spoolDir(t)
	s := startServer(t, storetest.NewDB(t), "TMPDIR="+spool, "HTTP_BODY_TIMEOUT=2s")
	big, multipartType := multipartBody(t, 8<<20)

	t.Run("multipart to the login form is refused unread", func(t *testing.T) {
		resp, body := post(t, s.base, "/login", multipartType, bytes.NewReader(big))
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, body)
		require.Contains(t, body, "application/x-www-form-urlencoded")
		requireEmptyDir(t, spool)
	})
	t.Run("multipart to a UI form with any session cookie is refused unread", func(t *testing.T) {
		for _, path := range []string{"/tasks/new", "/logout", "/workers", "/tasks/bulk"} {
			resp, body := post(t, s.base, path, multipartType, bytes.NewReader(big), "Cookie", "task_session=anything")
			require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%s: %s", path, body)
		}
		requireEmptyDir(t, spool)
	})
	t.Run("multipart to a JSON route is refused unread", func(t *testing.T) {
		resp, body := post(t, s.base, "/api/v1/auth/login", multipartType, bytes.NewReader(big))
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, body)
		require.Contains(t, body, `"code":"unsupported_media_type"`)
		requireEmptyDir(t, spool)
	})
	t.Run("the login form takes urlencoded only", func(t *testing.T) {
		for _, ct := range []string{"application/json", "text/plain", ""} {
			resp, body := post(t, s.base, "/login", ct, strings.NewReader(`{"email":"root@example.com","password":"root-password"}`))
			require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%q: %s", ct, body)
			require.Contains(t, body, "application/x-www-form-urlencoded")
			require.Empty(t, resp.Header.Values("Set-Cookie"))
		}
		form := url.Values{"email": {"root@example.com"}, "password": {"root-password"}}
		resp, body := post(t, s.base, "/login", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	})
	t.Run("an oversize form is 413", func(t *testing.T) {
		form := "email=root%40example.com&password=" + strings.Repeat("x", 2<<20)
		resp, body := post(t, s.base, "/login", "application/x-www-form-urlencoded", strings.NewReader(form))
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, body)
	})
	t.Run("a trickled form is cut at the body timeout", func(t *testing.T) {
		status, took := trickle(t, s.base, "/login", "application/x-www-form-urlencoded", 1000, "email=root%40example.com&password=")
		require.Equal(t, http.StatusRequestTimeout, status)
		require.Less(t, took, 10*time.Second)
	})
	t.Run("a trickled body before authentication is cut at the body timeout", func(t *testing.T) {
		for _, c := range []struct{ path, contentType string }{
			{"/api/v1/worker/tasks/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a/data?data_type=raw&filename=a.bin", "application/octet-stream"},
			{"/api/v1/worker/tasks/claim", "text/plain"},
			{"/tasks/new", "multipart/form-data; boundary=x"},
			{"/no-such-route", "application/octet-stream"},
		} {
			status, took := trickle(t, s.base, c.path, c.contentType, 10_000, "")
			require.NotZero(t, status, c.path)
			require.Less(t, took, 10*time.Second, "%s: the connection was held past the deadline", c.path)
		}
	})
	t.Run("multipart uploads of task data still work", func(t *testing.T) {
		wc, taskID := dataTask(t, s)
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		require.NoError(t, mw.WriteField("data_type", "raw"))
		f, err := mw.CreateFormFile("file", "one.bin")
		require.NoError(t, err)
		_, err = f.Write(bytes.Repeat([]byte("y"), 3<<20))
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		resp, body := post(t, s.base, "/api/v1/worker/tasks/"+taskID+"/data", mw.FormDataContentType(), &buf,
			"Authorization", "Bearer "+wc.Token())
		require.Equal(t, http.StatusCreated, resp.StatusCode, body)
		require.Contains(t, body, `"size_bytes":3145728`)
		requireEmptyDir(t, spool)
	})
}

// trickle sends a request whose body (of declared length) arrives a byte
// every 200 ms after prefix, and returns the status answered (0 for none)
// and how long the server took to close the connection.
func trickle(t *testing.T, base, path, contentType string, length int, prefix string) (int, time.Duration) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nOrigin: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, host, base, contentType, length, prefix)
	require.NoError(t, err)
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	r := bufio.NewReader(conn)
	status := 0
	if resp, err := http.ReadResponse(r, nil); err == nil {
		status = resp.StatusCode
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, _ = io.Copy(io.Discard, r) // until the server closes
	return status, time.Since(start)
}

// TestSlowMultipartLoginsMemory: 30 concurrent hostile multipart logins,
// trickled and large, keep the server's resident memory under 300 MB, and
// each connection is closed by the server within the body timeout.
func TestSlowMultipartLoginsMemory(t *testing.T) {
	t.Parallel()
	const bodyTimeout = 3 * time.Second
	spool := spoolDir(t)
	s := startServer(t, storetest.NewDB(t), "TMPDIR="+spool, "HTTP_BODY_TIMEOUT="+bodyTimeout.String())
	pid := s.cmd.Process.Pid
	host := strings.TrimPrefix(s.base, "http://")
	before := rss(t, pid)

	var peak atomic.Int64
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := rss(t, pid); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-sampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	const boundary = "hostileboundary"
	partHead := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nroot@example.com\r\n" +
		"--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
	type kind struct {
		name    string
		chunked bool
		trickle bool
	}
	kinds := []kind{{"trickled, declared 50 MiB", false, true}, {"trickled, chunked", true, true}, {"40 MiB at once, chunked", true, false}}
	closedAfter := make([]time.Duration, 30)
	var wg sync.WaitGroup
	for i := range 30 {
		k := kinds[i%len(kinds)]
		wg.Go(func() {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer conn.Close()
			length := "Content-Length: 52428800"
			if k.chunked {
				length = "Transfer-Encoding: chunked"
			}
			head := fmt.Sprintf("POST /login HTTP/1.1\r\nHost: %s\r\nOrigin: %s\r\nCookie: task_session=x\r\nContent-Type: multipart/form-data; boundary=%s\r\n%s\r\n\r\n",
				host, s.base, boundary, length)
			start := time.Now()
			if _, err := conn.Write([]byte(head)); err != nil {
				t.Errorf("write head: %v", err)
				return
			}
			go sendBody(conn, []byte(partHead), k.chunked, k.trickle)
			_ = conn.SetReadDeadline(time.Now().Add(bodyTimeout + 20*time.Second))
			_, _ = io.Copy(io.Discard, conn) // until the server closes
			closedAfter[i] = time.Since(start)
		})
	}
	wg.Wait()
	close(sampling)
	<-sampled
	t.Logf("resident memory: %d MB before, %d MB at the peak", before>>20, peak.Load()>>20)
	require.Less(t, peak.Load(), int64(300<<20), "resident memory stays under 300 MB")
	for i, d := range closedAfter {
		require.Less(t, d, bodyTimeout+8*time.Second, "connection %d (%s) was held past the body timeout", i, kinds[i%len(kinds)].name)
	}
	requireEmptyDir(t, spool)

	resp, err := http.Get(s.base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the server is still well")
}

// sendBody writes a multipart body after head: a byte every 100 ms, or
// 40 MiB as fast as the server takes it. Write errors end it: the server
// hung up.
func sendBody(conn net.Conn, head []byte, chunked, trickle bool) {
	write := func(p []byte) error {
		if chunked {
			if _, err := fmt.Fprintf(conn, "%x\r\n", len(p)); err != nil {
				return err
			}
			p = append(p, "\r\n"...)
		}
		_, err := conn.Write(p)
		return err
	}
	if write(head) != nil {
		return
	}
	block := bytes.Repeat([]byte("z"), 64<<10)
	for sent := 0; sent < 40<<20; {
		if trickle {
			time.Sleep(100 * time.Millisecond)
			if write([]byte("z")) != nil {
				return
			}
			sent++
			continue
		}
		if write(block) != nil {
			return
		}
		sent += len(block)
	}
}

// TestMetricsCardinality: invented methods and random paths add no series.
func TestMetricsCardinality(t *testing.T) {
	t.Parallel()
	s := startServer(t, storetest.NewDB(t))
	paths := []string{"/tasks/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a", "/api/v1/admin/workers/tasks", "/static/app.css", "/login"}
	send := func(method, path string) {
		req, err := http.NewRequest(method, s.base+path, nil)
		require.NoError(t, err)
		resp, err := noRedirects.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 500, "%s %s", method, path)
	}
	randomWord := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	// Once each: the series for "other" methods on these routes and on
	// unmatched paths exist from here on.
	for _, p := range append(paths, "/"+randomWord(4)) {
		send("WARM", p)
	}
	series := func() int {
		_, samples := scrape(t, s.base)
		n := 0
		for _, x := range samples {
			if strings.HasPrefix(x.name, "taskservice_http_request") {
				n++
			}
		}
		return n
	}
	series() // the scrape's own series
	before := series()
	for i := range 200 {
		method := strings.ToUpper("X" + randomWord(3))
		path := "/" + randomWord(6) + "/" + randomWord(2)
		if i%4 == 0 {
			path = paths[i/4%len(paths)]
		}
		send(method, path)
	}
	require.Equal(t, before, series(), "200 requests with invented methods and random paths added series")
	raw, _ := scrape(t, s.base)
	require.Contains(t, raw, `method="other"`)
	require.Contains(t, raw, `route="unmatched"`)
	require.NotRegexp(t, `method="X[0-9A-F]+"`, raw)
}

// sessionCookie logs in through the form with extra headers and returns
// the answer's Set-Cookie and Strict-Transport-Security.
func loginCookie(t *testing.T, base string, header ...string) (cookie, hsts string) {
	t.Helper()
	form := url.Values{"email": {"root@example.com"}, "password": {"root-password"}}
	resp, body := post(t, base, "/login", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()), header...)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Contains(t, resp.Header.Get("Set-Cookie"), "task_session=")
	return resp.Header.Get("Set-Cookie"), resp.Header.Get("Strict-Transport-Security")
}

func secureFlag(cookie string) bool {
	for _, attr := range strings.Split(cookie, ";") {
		if strings.EqualFold(strings.TrimSpace(attr), "Secure") {
			return true
		}
	}
	return false
}

// TestSecureCookieBehindProxy: X-Forwarded-Proto counts only from
// TRUSTED_PROXIES; COOKIE_SECURE overrides; HSTS only on secure requests.
func TestSecureCookieBehindProxy(t *testing.T) {
	t.Parallel()
	var trusted, untrusted, always, never *server
	var wg sync.WaitGroup
	wg.Go(func() {
		trusted = startServer(t, storetest.NewDB(t), "TRUSTED_PROXIES=127.0.0.1", "HSTS_MAX_AGE=8760h")
	})
	wg.Go(func() {
		untrusted = startServer(t, storetest.NewDB(t), "TRUSTED_PROXIES=10.0.0.0/8", "HSTS_MAX_AGE=8760h")
	})
	wg.Go(func() { always = startServer(t, storetest.NewDB(t), "COOKIE_SECURE=true") })
	wg.Go(func() { never = startServer(t, storetest.NewDB(t), "COOKIE_SECURE=false", "TRUSTED_PROXIES=127.0.0.1") })
	wg.Wait()

	cookie, hsts := loginCookie(t, trusted.base, "X-Forwarded-Proto", "https")
	require.True(t, secureFlag(cookie), "https at a trusted proxy: %s", cookie)
	require.Equal(t, "max-age=31536000", hsts)
	cookie, hsts = loginCookie(t, trusted.base, "X-Forwarded-Proto", "http")
	require.False(t, secureFlag(cookie), cookie)
	require.Empty(t, hsts, "no HSTS on plain HTTP")
	cookie, hsts = loginCookie(t, trusted.base)
	require.False(t, secureFlag(cookie), cookie)
	require.Empty(t, hsts)
	resp, err := http.Get(trusted.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Empty(t, resp.Header.Get("Strict-Transport-Security"))
	req, err := http.NewRequest(http.MethodGet, trusted.base+"/login", nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "max-age=31536000", resp.Header.Get("Strict-Transport-Security"), "on every secure answer")

	cookie, hsts = loginCookie(t, untrusted.base, "X-Forwarded-Proto", "https")
	require.False(t, secureFlag(cookie), "anyone may send X-Forwarded-Proto: %s", cookie)
	require.Empty(t, hsts)

	cookie, _ = loginCookie(t, always.base)
	require.True(t, secureFlag(cookie), "COOKIE_SECURE=true: %s", cookie)
	cookie, _ = loginCookie(t, never.base, "X-Forwarded-Proto", "https")
	require.False(t, secureFlag(cookie), "COOKIE_SECURE=false: %s", cookie)

	// A bad value stops the start, naming the variable, before the
	// database is touched.
	for _, bad := range []string{"COOKIE_SECURE=yes", "COOKIE_SECURE=TRUE", "COOKIE_SECURE=1", "HSTS_MAX_AGE=1y", "HSTS_MAX_AGE=-1h", "HSTS_MAX_AGE=1.5s", "TRUSTED_PROXIES=10.0.0.0/99"} {
		name, _, _ := strings.Cut(bad, "=")
		code, out := runCmd(t, baseEnv("DATABASE_URL=postgres://127.0.0.1:1/none", "JWT_SECRET=e2e-secret-0123456789abcdef", bad))
		require.NotZero(t, code, "%s: %s", bad, out)
		require.Contains(t, out, name, bad)
		require.NotContains(t, out, "127.0.0.1:1", "%s: the database was not touched", bad)
	}
}

// TestLoginRedirectStaysHome: the way back after a login is one of the
// UI's pages or the dashboard, never a Location a browser reads as
// another host.
func TestLoginRedirectStaysHome(t *testing.T) {
	t.Parallel()
	s := startServer(t, storetest.NewDB(t))
	login := func(next string) string {
		t.Helper()
		form := url.Values{"email": {"root@example.com"}, "password": {"root-password"}, "next": {next}}
		resp, body := post(t, s.base, "/login", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
		return resp.Header.Get("Location")
	}
	hostile := []string{
		"/\t/evil.example", "/%09/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/ /evil.example",
		"//evil.example", "//evil.example/tasks", "/\\evil.example", "/\\/evil.example", "\\\\evil.example",
		"https://evil.example/", "http:evil.example", "javascript:alert(1)", "\t//evil.example", " //evil.example",
		"/%2F/evil.example", "/%2f%2fevil.example", "/%5Cevil.example", "/%5C%5Cevil.example", "%2F%2Fevil.example",
		"/.//evil.example", "/tasks//evil.example", "/tasks/../..//evil.example", "/\u3000/evil.example",
		"/\uff0f\uff0fevil.example", "/no-such-page", "/login", "/static/app.js", "evil.example", "",
	}
	for _, next := range hostile {
		require.Equal(t, "/", login(next), "next=%q", next)
	}
	for _, next := range []string{"/", "/tasks", "/tasks?status=failed&priority=high", "/tasks/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a",
		"/schedules/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a", "/events?type=task.created"} {
		require.Equal(t, next, login(next), "next=%q is a page", next)
	}

	// The login page carries only a safe way back in its form.
	hidden := regexp.MustCompile(`name="next" value="([^"]*)"`)
	for _, raw := range []string{"/%09/evil.example", "//evil.example", "/%5Cevil.example", "https://evil.example"} {
		resp, err := http.Get(s.base + "/login?next=" + raw)
		require.NoError(t, err)
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := hidden.FindStringSubmatch(string(page))
		require.NotNil(t, m, "the login page has the next field")
		require.Equal(t, "/", m[1], "next=%s", raw)
	}
}

// TestStreamTokenBodyIsStrict: POST /admin/events/stream-token decodes its
// body like every JSON route.
func TestStreamTokenBodyIsStrict(t *testing.T) {
	t.Parallel()
	s := startServer(t, storetest.NewDB(t))
	hc := checkedHTTP(t, s.base, nil)
	admin := client.New(s.base, hc)
	_, err := admin.Login(context.Background(), "root@example.com", "root-password")
	require.NoError(t, err)
	send := func(contentType, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, s.base+"/api/v1/admin/events/stream-token", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+admin.Token())
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(raw)
	}
	for _, c := range []struct {
		name, contentType, body string
		status                  int
		want                    string
	}{
		{"malformed", "application/json", `{"x":`, 400, `"code":"validation_failed"`},
		{"unknown field", "application/json", `{"ttl":60}`, 400, `"field":"ttl"`},
		{"not an object", "application/json", `[]`, 400, `"field":"body"`},
		{"oversize", "application/json", `{"pad":"` + strings.Repeat("a", 2<<20) + `"}`, 413, `"code":"too_large"`},
		{"text/plain", "text/plain", `{}`, 415, `"code":"unsupported_media_type"`},
		{"empty", "", "", 200, `"token":`},
		{"empty object", "application/json", `{}`, 200, `"token":`},
	} {
		status, body := send(c.contentType, c.body)
		require.Equal(t, c.status, status, "%s: %s", c.name, body)
		require.Contains(t, body, c.want, c.name)
	}
	tok, err := admin.StreamToken(context.Background())
	require.NoError(t, err, "the Go client's call (no body) still works")
	require.NotEmpty(t, tok.Token)
}
