package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	"github.com/clawdbot/task-service/api/ui"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// TestPagesWhileTheDatabaseIsDown: while the database cannot be reached
// (restarting, failing over) a login and a page answer 503 with
// Retry-After, as the API does, never 500.
func TestPagesWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=1")
	require.NoError(t, err)
	defer pool.Close()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	secret := []byte("test-secret-0123456789abcdef")
	srv, err := api.New(api.Config{DB: db, JWTSecret: secret, BcryptCost: bcrypt.MinCost, Logger: zerolog.Nop()})
	require.NoError(t, err)
	pages, err := ui.New(ui.Config{API: srv, DB: db, Secret: secret, Logger: zerolog.Nop()})
	require.NoError(t, err)
	pages.Register(srv.Echo())
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	now := time.Now()
	session, err := jwt.NewWithClaims(jwt.SigningMethodHS256, api.Claims{Email: "ada@example.com", IsAdmin: true,
		RegisteredClaims: jwt.RegisteredClaims{Issuer: "task-service", Subject: uuid.NewString(),
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}}).SignedString(secret)
	require.NoError(t, err)
	form := url.Values{"email": {"ada@example.com"}, "password": {"ada-password-123"}}
	for _, c := range []struct {
		method, path, body string
		header             map[string]string
	}{
		{"POST", "/login", form.Encode(), map[string]string{"Origin": ts.URL, "Content-Type": "application/x-www-form-urlencoded"}},
		{"GET", "/tasks", "", map[string]string{"Cookie": api.SessionCookie + "=" + session}},
	} {
		req, err := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s: %s", c.method, c.path, page)
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
		require.Contains(t, string(page), "database is unavailable")
	}
}
