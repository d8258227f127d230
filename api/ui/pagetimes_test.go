package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/ui"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// TestPageTimes measures the server time of every admin UI page (make
// bench-ui): UI_BENCH_DATABASE_URL names one database or several,
// comma-separated (the taskservice_scale_* databases of make bench-scale),
// each page is called UI_BENCH_CALLS times (default 30) after a warm-up, in
// process (handler time, no network), and p50/p99 are printed side by side.
// It measures, it asserts nothing about speed. It applies pending migrations and adds one
// admin, ui-bench@example.com, to each database when missing.
func TestPageTimes(t *testing.T) {
	urls := os.Getenv("UI_BENCH_DATABASE_URL")
	if urls == "" {
		t.Skip("set UI_BENCH_DATABASE_URL (make bench-ui)")
	}
	calls := 30
	if n, err := strconv.Atoi(os.Getenv("UI_BENCH_CALLS")); err == nil && n > 0 {
		calls = n
	}
	type column struct {
		name  string
		times map[string][2]time.Duration
	}
	var cols []column
	var order []string
	for _, u := range strings.Split(urls, ",") {
		name, times, pages := pageTimes(t, strings.TrimSpace(u), calls)
		cols = append(cols, column{name, times})
		if order == nil {
			order = pages
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nserver time per page, p50 / p99 in ms, %d calls each\n%-34s", calls, "page")
	for _, c := range cols {
		fmt.Fprintf(&b, " | %-24s", c.name)
	}
	b.WriteString("\n")
	for _, p := range order {
		fmt.Fprintf(&b, "%-34s", p)
		for _, c := range cols {
			d := c.times[p]
			fmt.Fprintf(&b, " | %9.1f / %-12.1f", ms(d[0]), ms(d[1]))
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pageTimes times each page against one database; it returns the
// database's description, p50/p99 per page label and the labels in order.
func pageTimes(t *testing.T, dbURL string, calls int) (string, map[string][2]time.Duration, []string) {
	t.Helper()
	ctx := context.Background()
	// The indexes of migrations added since the database was built, as
	// make bench-scale does for a kept database.
	require.NoError(t, migrations.Up(ctx, dbURL))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	secret := []byte("ui-bench-secret-0123456789abcdef")
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	srv, err := api.New(api.Config{DB: db, JWTSecret: secret, BcryptCost: bcrypt.MinCost, Logger: log})
	require.NoError(t, err)
	pages, err := ui.New(ui.Config{API: srv, DB: db, Secret: secret, Logger: log})
	require.NoError(t, err)
	pages.Register(srv.Echo())
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = srv.Run(runCtx) }() // the auth cache and the tail, as in task-service

	const email, password = "ui-bench@example.com", "ui-bench-password"
	if _, _, err := db.Credentials(ctx, email); err != nil {
		hash, err := srv.HashPassword(password)
		require.NoError(t, err)
		_, err = db.CreateUser(ctx, events.UserRegistered{Email: email, FullName: "UI bench", IsAdmin: true},
			password, hash, events.Meta{Actor: events.System("ui-bench")})
		require.NoError(t, err)
	}
	h := srv.Handler()
	var cookie string
	for deadline := time.Now().Add(10 * time.Second); cookie == ""; time.Sleep(100 * time.Millisecond) {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"email": {email}, "password": {password}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://example.com")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		for _, c := range rec.Result().Cookies() {
			if c.Name == api.SessionCookie && rec.Code == http.StatusSeeOther {
				cookie = c.Name + "=" + c.Value
			}
		}
		require.True(t, time.Now().Before(deadline), "log in: %d %s", rec.Code, rec.Body.String())
	}

	// Sample ids: a retry (with its chain), an old task, a worker, a type.
	var tasks int
	var retryID, oldID, workerID, typeID, oldAt string
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM worker_tasks),
		coalesce((SELECT id::text FROM worker_tasks WHERE retry_count > 0 ORDER BY created_at DESC LIMIT 1), ''),
		(SELECT id::text FROM worker_tasks ORDER BY created_at LIMIT 1),
		coalesce((SELECT id::text FROM users WHERE is_worker ORDER BY id LIMIT 1), ''),
		(SELECT id::text FROM task_types ORDER BY name LIMIT 1)`).Scan(&tasks, &retryID, &oldID, &workerID, &typeID))
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM worker_tasks WHERE id = $1`, oldID).Scan(&oldAt))
	if retryID == "" {
		retryID = oldID
	}
	list := []struct{ label, path string }{
		{"dashboard", "/"},
		{"tasks", "/tasks"},
		{"tasks status=completed", "/tasks?status=completed"},
		{"tasks queue", "/tasks?queue=1"},
		{"tasks retries", "/tasks?retries=1"},
		{"tasks stuck", "/tasks?stuck=1"},
		{"tasks type", "/tasks?type=" + typeID},
		{"tasks assignee", "/tasks?assignee=" + workerID},
		{"tasks search common (synthetic)", "/tasks?q=synthetic"},
		{"tasks search rare (task 4242)", "/tasks?q=task+4242"},
		{"tasks search none (zzqx)", "/tasks?q=zzqx"},
		{"task detail (a retry)", "/tasks/" + retryID},
		{"task detail (oldest)", "/tasks/" + oldID},
		{"task as of", "/tasks/" + oldID + "?at=" + oldAt},
		{"new task", "/tasks/new?type=" + typeID},
		{"types", "/types"},
		{"type", "/types/" + typeID},
		{"workers", "/workers"},
		{"events", "/events"},
		{"events type=task.failed", "/events?type=task.failed"},
		{"events worker", "/events?worker=" + workerID},
		{"events task", "/events?task=" + oldID},
		{"schedules", "/schedules"},
	}
	out := map[string][2]time.Duration{}
	var labels []string
	for _, p := range list {
		get := func() (int, time.Duration) {
			req := httptest.NewRequest(http.MethodGet, p.path, nil)
			req.Header.Set("Cookie", cookie)
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, req)
			return rec.Code, time.Since(start)
		}
		code, _ := get() // warm-up
		require.Equal(t, http.StatusOK, code, p.path)
		ds := make([]time.Duration, calls)
		for i := range ds {
			_, ds[i] = get()
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		out[p.label] = [2]time.Duration{ds[len(ds)/2], ds[(len(ds)*99+99)/100-1]}
		labels = append(labels, p.label)
	}
	u, _ := url.Parse(dbURL)
	return fmt.Sprintf("%s (%d tasks)", strings.TrimPrefix(u.Path, "/"), tasks), out, labels
}
