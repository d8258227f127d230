package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// do sends one request and returns the response and its body.
func do(t *testing.T, hc *http.Client, method, url string, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	return resp, string(raw)
}

// TestEdges: content types, request ids and CORS at the HTTP edge.
func TestEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	auth := "Bearer " + b.admin.Token()
	task := `{"title":"t","task_type_id":"` + tt.ID + `","params":{"days":1}}`

	t.Run("JSON sent as text/plain is 415, nothing changes", func(t *testing.T) {
		before := b.snapshot(t)
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", ";;"} {
			resp, body := do(t, b.http, "POST", b.url+"/api/v1/admin/workers/tasks", task,
				map[string]string{"Authorization": auth, "Content-Type": ct})
			require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%s: %s", ct, body)
			require.Contains(t, body, `"code":"unsupported_media_type"`)
		}
		require.Equal(t, before, b.snapshot(t))
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json", ""} {
			resp, body := do(t, b.http, "POST", b.url+"/api/v1/admin/workers/tasks", task,
				map[string]string{"Authorization": auth, "Content-Type": ct})
			require.Equal(t, http.StatusCreated, resp.StatusCode, "%q: %s", ct, body)
		}
	})

	t.Run("request ids", func(t *testing.T) {
		for _, c := range []struct {
			sent string
			kept bool
		}{
			{"abc-123.XYZ_9:z", true},
			{strings.Repeat("a", 128), true},
			{strings.Repeat("a", 129), false},
			{strings.Repeat("x", 200_000), false},
			{"has space", false},
			{"<script>", false},
			{"naïve", false},
		} {
			resp, body := do(t, b.http, "POST", b.url+"/api/v1/admin/workers/tasks", task,
				map[string]string{"Authorization": auth, "Content-Type": "application/json", "X-Request-Id": c.sent})
			require.Equal(t, http.StatusCreated, resp.StatusCode, body)
			got := resp.Header.Get("X-Request-Id")
			if c.kept {
				require.Equal(t, c.sent, got)
			} else {
				require.NotEqual(t, c.sent, got)
				require.Regexp(t, `^[A-Za-z0-9]{32}$`, got)
			}
			var meta string
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT meta->>'request_id' FROM task_events ORDER BY seq DESC LIMIT 1`).Scan(&meta))
			require.Equal(t, got, meta, "the event's meta holds the id the client was given")
		}
	})

	t.Run("CORS is closed by default", func(t *testing.T) {
		resp, _ := do(t, b.http, "OPTIONS", b.url+"/api/v1/admin/workers", "", map[string]string{
			"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
		for k := range resp.Header {
			require.False(t, strings.HasPrefix(k, "Access-Control-"), "header %s", k)
		}
	})

	t.Run("CORS_ALLOWED_ORIGINS opens it for those origins only", func(t *testing.T) {
		srv, err := api.New(api.Config{DB: b.db, JWTSecret: b.secret, BcryptCost: bcrypt.MinCost,
			CORSOrigins: []string{"https://ui.example"}, Logger: zerolog.Nop()})
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		resp, _ := do(t, b.http, "OPTIONS", ts.URL+"/api/v1/admin/workers", "", map[string]string{
			"Origin": "https://ui.example", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"})
		require.Equal(t, "https://ui.example", resp.Header.Get("Access-Control-Allow-Origin"))
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"), "no cookies cross-origin")
		resp, _ = do(t, b.http, "GET", ts.URL+"/api/v1/admin/workers", "", map[string]string{"Origin": "https://ui.example", "Authorization": auth})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "https://ui.example", resp.Header.Get("Access-Control-Allow-Origin"))
		resp, _ = do(t, b.http, "OPTIONS", ts.URL+"/api/v1/admin/workers", "", map[string]string{
			"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	})
}

// TestDatabaseDown: while the database cannot be reached every request is
// 503 unavailable with Retry-After (never 500), and /readyz says "down"
// without the driver's text (user, host, port).
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://secret_user@127.0.0.1:1/nowhere?connect_timeout=1")
	require.NoError(t, err)
	defer pool.Close()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	secret := []byte("test-secret-0123456789abcdef")
	srv, err := api.New(api.Config{DB: db, JWTSecret: secret, BcryptCost: bcrypt.MinCost,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	hc := &http.Client{Timeout: 30 * time.Second}

	resp, body := do(t, hc, "GET", ts.URL+"/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Contains(t, body, `"database":"down"`)
	for _, leak := range []string{"secret_user", "127.0.0.1", ":1", "nowhere", "connect"} {
		require.NotContains(t, body, leak)
	}

	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, api.Claims{Email: "a@example.com", IsAdmin: true, IsWorker: true,
		RegisteredClaims: jwt.RegisteredClaims{Issuer: "task-service", Subject: uuid.NewString(),
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}}).SignedString(secret)
	require.NoError(t, err)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/auth/login", `{"email":"a@example.com","password":"whatever-it-is"}`},
		{"GET", "/api/v1/admin/workers", ""},
		{"POST", "/api/v1/worker/tasks/claim", ""},
		{"GET", "/api/v1/admin/events", ""},
	} {
		resp, body := do(t, hc, c.method, ts.URL+c.path, c.body, map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, body, `"code":"unavailable"`)
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
		require.NotContains(t, body, "secret_user")
	}
}

// TestSlowBody: a client trickling a JSON body is cut off after the body
// timeout (408), while a long-poll without a body is not.
func TestSlowBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, err := api.New(api.Config{DB: b.db, JWTSecret: b.secret, BcryptCost: bcrypt.MinCost,
		BodyReadTimeout: 300 * time.Millisecond, Logger: zerolog.Nop()})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"email\":")
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers instead of waiting for the rest")
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	require.Less(t, time.Since(start), 5*time.Second)

	// A long-poll claim has no body: the body timeout does not cut it.
	w := b.newWorker(t, "Patient", 1)
	start = time.Now()
	req, err := http.NewRequest("POST", ts.URL+"/api/v1/worker/tasks/claim?wait=1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+w.Token())
	r, err := b.http.Do(req)
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "it waited its second")
}

// TestTrustedProxies: X-Forwarded-For names the client only when the peer
// is a trusted proxy; otherwise every forged address shares the peer's
// bucket.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, loopback, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	limited := func(trusted []*net.IPNet) int {
		srv, err := api.New(api.Config{DB: b.db, JWTSecret: b.secret, BcryptCost: bcrypt.MinCost, Logger: zerolog.Nop(),
			TrustedProxies: trusted, Login: api.LoginConfig{AddressBurst: 2, AccountBurst: 1000, LockoutAfter: 1000}})
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		n := 0
		for i := range 6 {
			resp, _ := do(t, b.http, "POST", ts.URL+"/api/v1/auth/login", `{"email":"x@example.com","password":"wrong-password"}`,
				map[string]string{"Content-Type": "application/json", "X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i)})
			if resp.StatusCode == http.StatusTooManyRequests {
				n++
			}
		}
		return n
	}
	require.Equal(t, 4, limited(nil), "untrusted peer: the forged addresses share one bucket of 2")
	require.Equal(t, 0, limited([]*net.IPNet{loopback}), "trusted proxy: each forwarded client has its own bucket")
}
