package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/digest"
	"github.com/clawdbot/task-service/store/storetest"
)

const (
	testAdmin    = "ada@example.com"
	testPassword = "admin-password"
)

// cliEnv is a task-service on a fresh database and a taskctl whose config
// lives in a temporary HOME. Tests that use it set environment variables,
// so they do not run in parallel.
type cliEnv struct {
	t     *testing.T
	ts    *httptest.Server
	pool  *pgxpool.Pool
	dbURL string
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	dbURL := storetest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	hub := store.NewHub()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, AfterCommit: hub.Wake})
	require.NoError(t, err)
	dataDir := t.TempDir()
	dataStore, err := blob.NewFS(dataDir)
	require.NoError(t, err)
	t.Setenv("DATA_DIR", dataDir)
	t.Setenv("DATA_S3_BUCKET", "")
	srv, err := api.New(api.Config{DB: db, JWTSecret: []byte("taskctl-test-secret-0123456789"), BcryptCost: bcrypt.MinCost,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Hub: hub,
		Data: api.DataConfig{Store: dataStore},
		// The last second of the day: the digest preview covers the day so far.
		Digest: digest.Schedule{At: digest.Clock{Hour: 23, Minute: 59, Second: 59}, Loc: time.UTC}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(ctx)
	}()
	// Every answer taskctl gets is validated against the API's document (its
	// check runs at cleanup, after the server below has closed).
	doc, err := json.Marshal(srv.OpenAPI())
	require.NoError(t, err)
	ts := httptest.NewServer(apitest.New(t, doc).Handler(srv.Handler()))
	t.Cleanup(func() { ts.CloseClientConnections(); cancel(); <-done; ts.Close() })
	hash, err := srv.HashPassword(testPassword)
	require.NoError(t, err)
	_, err = db.CreateUser(context.Background(), events.UserRegistered{Email: testAdmin, FullName: "Ada Admin", IsAdmin: true},
		testPassword, hash, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)

	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("TASKCTL_API", ts.URL)
	for _, v := range []string{"TASKCTL_TOKEN", "TASKCTL_PASSWORD", "TASKCTL_EMAIL", "TASKCTL_WORKER_PASSWORD", "DATABASE_URL"} {
		t.Setenv(v, "")
	}
	return &cliEnv{t: t, ts: ts, pool: pool, dbURL: dbURL}
}

// taskctl runs a command in-process and returns its exit code and output.
func (e *cliEnv) taskctl(args ...string) (int, string, string) {
	e.t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ok runs a command that must succeed and returns its standard output.
func (e *cliEnv) ok(args ...string) string {
	e.t.Helper()
	code, out, errOut := e.taskctl(args...)
	require.Equal(e.t, exitOK, code, "taskctl %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	return out
}

func (e *cliEnv) login() {
	e.t.Helper()
	e.ok("login", "--email", testAdmin, "--password", testPassword)
}

func (e *cliEnv) writeFile(name, content string) string {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), name)
	require.NoError(e.t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

var uuidRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func TestLoginKeepsTheTokenPrivately(t *testing.T) {
	e := newCLIEnv(t)

	code, _, errOut := e.taskctl("tasks", "list")
	require.Equal(t, exitAuth, code)
	require.Contains(t, errOut, "not logged in to "+e.ts.URL)
	require.Contains(t, errOut, "taskctl login --email")

	code, _, errOut = e.taskctl("login", "--email", testAdmin, "--password", "not-the-password")
	require.Equal(t, exitAuth, code)
	require.Contains(t, errOut, "wrong email or password")

	t.Setenv("TASKCTL_PASSWORD", testPassword)
	out := e.ok("login", "--email", testAdmin)
	require.Contains(t, out, "Logged in to "+e.ts.URL+" as Ada Admin")
	path := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "taskctl", "config.json")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	dir, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), dir.Mode().Perm())
	var cfg config
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Equal(t, e.ts.URL, cfg.API)
	require.NotEmpty(t, cfg.Sessions[e.ts.URL].Token)

	e.ok("tasks", "list")

	// The API address of the last login is the default without TASKCTL_API.
	t.Setenv("TASKCTL_API", "")
	e.ok("types", "list")

	// A token the server refuses (expired, another server's) says to log in.
	cfg.Sessions[e.ts.URL] = session{Token: "not-a-jwt", Email: testAdmin, ExpiresAt: time.Now().Add(time.Hour)}
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	code, _, errOut = e.taskctl("tasks", "list")
	require.Equal(t, exitAuth, code, errOut)
	require.Contains(t, errOut, "taskctl login")

	// An expired login is caught before any request.
	cfg.Sessions[e.ts.URL] = session{Token: "x", Email: testAdmin, ExpiresAt: time.Now().Add(-time.Minute)}
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	code, _, errOut = e.taskctl("stats")
	require.Equal(t, exitAuth, code)
	require.Contains(t, errOut, "expired")

	e.ok("logout")
	code, _, _ = e.taskctl("stats")
	require.Equal(t, exitAuth, code)
}

func TestTypesTasksHistoryAndChain(t *testing.T) {
	e := newCLIEnv(t)
	e.login()

	sop := e.writeFile("review.md", "# Code review\n\n1. Read the diff.\n2. Run the tests.\n")
	schema := e.writeFile("review.json", `{"type": "object", "properties": {"pr": {"type": "integer", "minimum": 1}}, "required": ["pr"]}`)
	out := e.ok("types", "create", "--name", "code_review", "--label", "Code review", "--sop-file", sop, "--schema-file", schema,
		"--max-retries", "2", "--timeout", "45m")
	require.Contains(t, out, "Created task type code_review")
	require.Contains(t, e.ok("types", "list"), "code_review")
	out = e.ok("types", "show", "code_review")
	require.Contains(t, out, "2. Run the tests.")
	require.Contains(t, out, `"required": [`)
	require.Contains(t, out, "45m0s")

	// The README's example files exist and are accepted as they are.
	out = e.ok("types", "create", "--name", "readme_review", "--sop-file", "../../docs/examples/review.md",
		"--schema-file", "../../docs/examples/review.json", "--max-retries", "2")
	require.Contains(t, out, "Created task type readme_review")

	bad := e.writeFile("bad.json", `{"type": "object",`)
	code, _, errOut := e.taskctl("types", "create", "--name", "broken", "--schema-file", bad)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--schema is not JSON")

	out = e.ok("workers", "create", "--email", "genesis@bots.example.com", "--name", "Genesis", "--max-concurrent", "2")
	require.Contains(t, out, "Password (shown once): ")
	workerPassword := strings.TrimSpace(out[strings.Index(out, "Password (shown once): ")+len("Password (shown once): "):])
	require.Contains(t, e.ok("workers", "list"), "genesis@bots.example.com")

	out = e.ok("tasks", "create", "--type", "code_review", "--title", "Review PR 42", "--priority", "high",
		"--params", `{"pr": 42}`, "--assign", "genesis@bots.example.com", "--reason", "knows the code")
	require.Contains(t, out, "Created task ")
	taskID := uuidRe.FindString(out)
	require.NotEmpty(t, taskID)

	// Params that break the type's schema are refused by the server: the
	// message names the field and the exit code is a failure.
	code, _, errOut = e.taskctl("tasks", "create", "--type", "code_review", "--title", "No PR", "--params", `{"pr": 0}`)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "pr")
	require.Contains(t, errOut, "HTTP 400")

	out = e.ok("tasks", "list")
	require.Contains(t, out, taskID)
	require.Contains(t, out, "Genesis")
	require.Contains(t, out, "code_review")
	var page store.TaskPage
	require.NoError(t, json.Unmarshal([]byte(e.ok("tasks", "list", "--status", "pending", "--json")), &page))
	require.Len(t, page.Tasks, 1)
	require.Equal(t, taskID, page.Tasks[0].ID)

	out = e.ok("tasks", "show", taskID)
	require.Contains(t, out, "Review PR 42")
	require.Contains(t, out, "assigned")
	require.Contains(t, out, "knows the code")

	e.ok("tasks", "cancel", taskID, "--reason", "merged already")
	out = e.ok("history", taskID)
	for _, s := range []string{"task.created", "task.assigned", "task.cancelled", "admin Ada Admin", "assigned to Genesis", "merged already"} {
		require.Contains(t, out, s)
	}
	require.Regexp(t, `(?m)^TIME\s+BY\s+EVENT\s+SUMMARY$`, out)
	var evs []client.Event
	require.NoError(t, json.Unmarshal([]byte(e.ok("history", taskID, "--json")), &evs))
	require.Len(t, evs, 3)

	out = e.ok("tasks", "show", taskID, "--at", evs[1].OccurredAt.Format(time.RFC3339Nano))
	require.Contains(t, out, "pending")
	require.NotContains(t, out, "cancelled")

	out = e.ok("chain", taskID)
	require.Contains(t, out, taskID)
	require.Contains(t, out, "cancelled")

	// A cancelled task cannot be retried: the server says why.
	code, _, errOut = e.taskctl("tasks", "retry", taskID)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "HTTP 409")

	// A failed attempt retried by hand: the chain shows both attempts.
	out = e.ok("tasks", "create", "--type", "code_review", "--title", "Review PR 43", "--params", `{"pr": 43}`)
	failedID := uuidRe.FindString(out)
	worker := client.New(e.ts.URL, nil)
	ctx := context.Background()
	_, err := worker.Login(ctx, "genesis@bots.example.com", workerPassword)
	require.NoError(t, err)
	claimed, err := worker.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, failedID, claimed.ID)
	_, err = worker.Fail(ctx, failedID, "tests fail on main")
	require.NoError(t, err)
	out = e.ok("tasks", "retry", failedID, "--hint", "rebase on main first")
	require.Contains(t, out, "Created retry ")
	retryID := uuidRe.FindString(out)
	out = e.ok("chain", retryID)
	require.Contains(t, out, failedID)
	require.Contains(t, out, retryID+" *")
	require.Contains(t, out, "tests fail on main")
	require.Contains(t, out, "rebase on main first")
	require.Contains(t, out, "2 attempts")

	out = e.ok("stats")
	require.Contains(t, out, "Tasks by status")
	require.Regexp(t, `cancelled\s+1`, out)

	// Today's digest: the day's failure is in it, as the chat would read it.
	out = e.ok("digest", "--preview")
	require.Contains(t, out, "📊 Daily digest: ")
	require.Contains(t, out, "Top failure reasons\n• 1× tests fail on main")
	require.NotContains(t, out, "<b>")
	code, _, errOut = e.taskctl("digest")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "say --preview")
}

func TestExitCodesAndHelp(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"nope"}, exitUsage, "unknown command"},
		{[]string{"version", "extra"}, exitUsage, "takes no arguments"},
		{[]string{"tasks"}, exitUsage, "Verbs:"},
		{[]string{"tasks", "frob"}, exitUsage, "unknown verb"},
		{[]string{"tasks", "show"}, exitUsage, "missing TASK"},
		{[]string{"tasks", "show", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{[]string{"tasks", "list", "--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"tasks", "create", "--title", "x"}, exitUsage, "--type and --title are required"},
		{[]string{"tasks", "show", "--at", "yesterday", "0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d"}, exitUsage, "RFC 3339"},
		{[]string{"tasks", "show", "0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d"}, exitFailure, "not found"},
		{[]string{"tasks", "create", "--type", "nope", "--title", "x"}, exitUsage, `no task type named "nope"`},
		{[]string{"replay"}, exitUsage, "--database-url"},
		{[]string{"tail", "--after", "1-1", "--from-start"}, exitUsage, "not both"},
		{[]string{"stats", "--api", "http://127.0.0.1:1"}, exitAuth, "not logged in to http://127.0.0.1:1"},
		// Global flags anywhere: before the command, before a verb.
		{[]string{"--api", "http://127.0.0.1:1", "stats"}, exitAuth, "not logged in to http://127.0.0.1:1"},
		{[]string{"--api=http://127.0.0.1:1", "--json", "tasks", "list"}, exitAuth, "not logged in to http://127.0.0.1:1"},
		{[]string{"tasks", "--api", "http://127.0.0.1:1", "list"}, exitAuth, "not logged in to http://127.0.0.1:1"},
		{[]string{"--api"}, exitUsage, "flag needs an argument"},
		{[]string{"--bogus", "stats"}, exitUsage, "unknown command"},
		// Nothing asked: the help, as a mistake.
		{nil, exitUsage, "Usage: taskctl COMMAND"},
		{[]string{"--api", "http://127.0.0.1:1"}, exitUsage, "Usage: taskctl COMMAND"},
	} {
		code, _, errOut := e.taskctl(tc.args...)
		require.Equal(t, tc.code, code, "taskctl %s: %s", strings.Join(tc.args, " "), errOut)
		require.Contains(t, errOut, tc.err, "taskctl %s", strings.Join(tc.args, " "))
	}

	// Unreachable API with a token: a failure that says where to look.
	t.Setenv("TASKCTL_TOKEN", "x")
	code, _, errOut := e.taskctl("stats", "--api", "http://127.0.0.1:1")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "cannot reach the API")
	t.Setenv("TASKCTL_TOKEN", "")

	for _, spelling := range []string{"version", "--version", "-version"} {
		require.Regexp(t, `^taskctl version \S+\nrevision `, e.ok(spelling))
	}
	require.Contains(t, e.ok("--help"), "Usage: taskctl COMMAND")

	// Every command and verb has --help with an example, on stdout, exit 0.
	for name := range commands() {
		if name == "bench" {
			continue // its own helper's
		}
		out := e.ok(name, "--help")
		require.Contains(t, out, "Usage: taskctl "+name, name)
		if !strings.Contains(out, "Verbs:") {
			require.Contains(t, out, "Example:\n  ", name)
			continue
		}
		for _, line := range strings.Split(out[strings.Index(out, "Verbs:"):], "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				break
			}
			verbOut := e.ok(name, fields[0], "--help")
			require.Contains(t, verbOut, "Example:\n  ", name+" "+fields[0])
		}
	}
}

// syncBuffer is written by the tail's goroutine and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail follows the stream as JSON, reconnects by itself when the server
// drops the connection, and prints every event exactly once, in order.
func TestTailReconnectsAndResumes(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "crawl")

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	a := &app{ctx: ctx, stdout: &out, stderr: &errOut, stdin: strings.NewReader(""), getenv: os.Getenv}
	done := make(chan int)
	go func() { done <- a.tail([]string{"--json", "--from-start", "--type", "task.created"}) }()

	lines := func() []client.Event {
		var evs []client.Event
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l == "" {
				continue
			}
			var ev client.Event
			require.NoError(t, json.Unmarshal([]byte(l), &ev), l)
			evs = append(evs, ev)
		}
		return evs
	}
	create := func(n int) {
		for range n {
			e.ok("tasks", "create", "--type", "crawl", "--title", "crawl a site")
		}
	}
	create(3)
	require.Eventually(t, func() bool { return len(lines()) == 3 }, 10*time.Second, 20*time.Millisecond)
	for range 2 {
		e.ts.CloseClientConnections() // the server goes away mid-stream
		create(3)
	}
	require.Eventually(t, func() bool { return len(lines()) == 9 }, 15*time.Second, 20*time.Millisecond, "stderr: %s", errOut.String())
	cancel()
	require.Equal(t, exitOK, <-done)
	require.Contains(t, errOut.String(), "resuming after ")

	seen := map[string]bool{}
	evs := lines()
	for i, ev := range evs {
		require.Equal(t, "task.created", ev.Type)
		require.False(t, seen[ev.Position], "duplicate %s", ev.Position)
		seen[ev.Position] = true
		if i > 0 {
			prev, err := events.ParsePosition(evs[i-1].Position)
			require.NoError(t, err)
			cur, err := events.ParsePosition(ev.Position)
			require.NoError(t, err)
			require.True(t, prev.Less(cur), "in order")
		}
	}

	// Readable lines: time, type, stream, who, what.
	ctx2, cancel2 := context.WithCancel(context.Background())
	var human syncBuffer
	a = &app{ctx: ctx2, stdout: &human, stderr: &errOut, stdin: strings.NewReader(""), getenv: os.Getenv}
	go func() { done <- a.tail([]string{"--from-start", "--type", "task.created"}) }()
	require.Eventually(t, func() bool { return strings.Count(human.String(), "\n") == 9 }, 10*time.Second, 20*time.Millisecond)
	cancel2()
	require.Equal(t, exitOK, <-done)
	require.Contains(t, human.String(), `admin Ada Admin`)
	require.Contains(t, human.String(), `created "crawl a site" (medium)`)
}

func TestReplayCommand(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "crawl")
	out := e.ok("tasks", "create", "--type", "crawl", "--title", "crawl a site")
	taskID := uuidRe.FindString(out)

	out = e.ok("replay", "--verify", "--database-url", e.dbURL)
	require.Contains(t, out, "No differences")
	require.Regexp(t, `worker_tasks\s+1\s+0\s+0`, out)

	_, err := e.pool.Exec(context.Background(), `UPDATE worker_tasks SET title = 'x' WHERE id = $1`, taskID)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", e.dbURL)
	code, out, errOut := e.taskctl("replay", "--verify")
	require.Equal(t, exitFailure, code, errOut)
	require.Contains(t, out, "worker_tasks id="+taskID+` changed: title: live "x", events "crawl a site"`)
	require.Contains(t, errOut, "replay: read ") // plain progress lines off a terminal

	out = e.ok("replay")
	require.Contains(t, out, "Rebuilt the projections from 3 events")
	require.Contains(t, e.ok("replay", "--verify"), "No differences")
	require.Contains(t, e.ok("tasks", "show", taskID), "crawl a site")

	var rep struct {
		Events int `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("replay", "--verify", "--json")), &rep))
	require.Equal(t, 3, rep.Events) // the admin, the type, the task
}

// A what-if window that holds more retry chains open at once than
// --max-open-chains is refused, saying what to do.
func TestReplayWhatIfOpenChains(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "crawl")
	for _, title := range []string{"one", "two"} {
		e.ok("tasks", "create", "--type", "crawl", "--title", title)
	}
	policy := e.writeFile("policy.json", `{}`)
	t.Setenv("DATABASE_URL", e.dbURL)
	code, _, errOut := e.taskctl("replay", "--what-if", policy, "--since", "1d", "--max-open-chains", "1")
	require.Equal(t, exitFailure, code, errOut)
	require.Contains(t, errOut, "--since 1d: the window holds more than 1 retry chains open at once")
	require.Contains(t, errOut, "choose a shorter --since, or raise --max-open-chains")
	require.Contains(t, e.ok("replay", "--what-if", policy, "--since", "1d", "--max-open-chains", "2"), "2 chains")
}

// The schedules commands against a real server: create, list, show,
// update, the actions, run, executions; and the refusals users meet.
func TestSchedulesCommands(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "crawl")
	out := e.ok("schedules", "create", "--name", "nightly crawl", "--type", "crawl", "--title", "crawl the site",
		"--params", `{"site":"example.com"}`, "--cron", "0 6 * * 1-5", "--tz", "Europe/Berlin")
	require.Contains(t, out, `Created schedule "nightly crawl" (cron "0 6 * * 1-5" Europe/Berlin)`)
	require.Contains(t, e.ok("schedules", "list", "--state", "active"), "nightly crawl")
	out = e.ok("schedules", "update", "nightly crawl", "--every", "2h", "--priority", "high")
	require.Contains(t, out, "every 2 hours")
	out = e.ok("schedules", "run", "nightly crawl")
	require.Contains(t, out, "Run #1")
	out = e.ok("schedules", "executions", "nightly crawl")
	require.Contains(t, out, "pending")
	out = e.ok("schedules", "show", "nightly crawl")
	require.Contains(t, out, "every 2 hours")
	require.Contains(t, out, "Runs")
	require.Contains(t, e.ok("schedules", "pause", "nightly crawl", "--reason", "maintenance"), "is paused")
	require.Contains(t, e.ok("schedules", "resume", "nightly crawl"), "is active")
	require.Contains(t, e.ok("schedules", "cancel", "nightly crawl"), "is cancelled")

	code, _, errOut := e.taskctl("schedules", "pause", "nightly crawl")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "cannot pause a schedule that is cancelled")
	code, _, errOut = e.taskctl("schedules", "create", "--type", "crawl", "--title", "x", "--every", "30s")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "interval")
	code, _, errOut = e.taskctl("schedules", "create", "--type", "crawl", "--title", "x", "--every", "soon")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "30m, 2h or 1d")
}

// taskctl sets a type's limits on create and with types limit, shows each
// with its use now, and a bad limit fails naming its field with nothing
// changed.
func TestTypesLimits(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	out := e.ok("types", "create", "--name", "crawl", "--max-in-progress", "10", "--rate", "50/60s")
	require.Contains(t, out, "Created task type crawl")
	out = e.ok("types", "show", "crawl")
	require.Regexp(t, `Max in progress\s+10 \(0 in progress now\)`, out)
	require.Regexp(t, `Rate limit\s+50 per 1m \(0 claims in the last 1m\)`, out)

	out = e.ok("types", "limit", "crawl", "--key", "$.ticker", "--per-key", "1")
	require.Contains(t, out, "Limits: 1 in progress per $.ticker")
	out = e.ok("types", "show", "crawl")
	require.NotContains(t, out, "Max in progress", "types limit replaces the limits")
	require.Regexp(t, `Per key\s+1 in progress per \$\.ticker \(0 keys in progress, 0 at the limit\)`, out)
	var shown struct {
		events.TaskType
		Usage store.TypeUsage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("types", "show", "crawl", "--json")), &shown))
	require.Equal(t, "$.ticker", shown.ConcurrencyKey)
	require.Equal(t, 1, *shown.MaxInProgressPerKey)
	require.Equal(t, 0, shown.Usage.InProgress)

	code, _, errOut := e.taskctl("types", "limit", "crawl", "--key", "ticker", "--per-key", "1")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "concurrency_key")
	require.Contains(t, errOut, "HTTP 400")
	code, _, errOut = e.taskctl("types", "limit", "crawl", "--rate", "0/1m")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "rate_limit.count")
	code, _, errOut = e.taskctl("types", "limit", "crawl", "--rate", "often")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--rate must be COUNT/WINDOW")
	require.Regexp(t, `Per key\s+1 in progress per \$\.ticker`, e.ok("types", "show", "crawl"), "nothing changed")

	out = e.ok("types", "limit", "crawl", "--none")
	require.NotContains(t, out, "Limits:")
	require.Regexp(t, `Limits\s+none \(0 in progress now\)`, e.ok("types", "show", "crawl"))
}

// A type's alias and params template (what Telegram's /add uses) are set
// at creation, shown, and kept when the limits change.
func TestTypesAliasAndParamsTemplate(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	out := e.ok("types", "create", "--name", "reddit_crawl", "--alias", "reddit", "--params-template", `{"ticker": "{{key}}"}`)
	require.Contains(t, out, "Created task type reddit_crawl")
	e.ok("types", "limit", "reddit_crawl", "--max-in-progress", "3")
	out = e.ok("types", "show", "reddit_crawl")
	require.Regexp(t, `Alias\s+reddit`, out)
	require.Regexp(t, `Params template\s+\{"ticker":"\{\{key\}\}"\}`, out)
	code, _, errOut := e.taskctl("types", "create", "--name", "broken", "--params-template", `{"{{key}}": 1}`)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "params_template")
}

// The bash completion script works in bash: commands, verbs after a global
// flag, the global flags; zsh and fish scripts name every command and verb.
func TestCompletionScripts(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, exitOK, run([]string{"completion", "bash"}, &out, &errOut), errOut.String())
	script := filepath.Join(t.TempDir(), "taskctl.bash")
	require.NoError(t, os.WriteFile(script, out.Bytes(), 0o600))
	complete := func(words ...string) string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = strconv.Quote(w)
		}
		cmd := exec.Command("bash", "-c", fmt.Sprintf(`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _taskctl; echo "${COMPREPLY[*]}"`,
			script, strings.Join(quoted, " "), len(words)-1))
		got, err := cmd.CombinedOutput()
		require.NoError(t, err, string(got))
		return strings.TrimSpace(string(got))
	}
	require.Equal(t, "tail tasks", complete("taskctl", "ta"))
	require.Equal(t, "cancel create", complete("taskctl", "--api", "http://x", "tasks", "c"))
	require.Equal(t, "deactivate", complete("taskctl", "workers", "de"))
	require.Equal(t, "--api", complete("taskctl", "stats", "--a"))
	require.Equal(t, "", complete("taskctl", "tasks", "list", "x"), "nothing after the verb")

	for _, shell := range []string{"zsh", "fish"} {
		out.Reset()
		require.Equal(t, exitOK, run([]string{"completion", shell}, &out, &errOut))
		for name := range commands() {
			require.Contains(t, out.String(), name, shell)
		}
		for _, verb := range []string{"deactivate", "import", "executions"} {
			require.Contains(t, out.String(), verb, shell)
		}
	}
	require.Equal(t, exitUsage, run([]string{"completion", "tcsh"}, &out, &errOut))
}

// A task that waits for another: tasks create --depends-on starts it
// blocked (--on-dependency-failure wait keeps it so when the dependency
// fails for good), and tasks release frees it at once.
func TestTaskDependencyCommands(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "crawl")
	var first, waiting struct {
		ID                  string   `json:"id"`
		Status              string   `json:"status"`
		DependsOn           []string `json:"depends_on"`
		OnDependencyFailure *string  `json:"on_dependency_failure"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("tasks", "create", "--type", "crawl", "--title", "Crawl Reddit", "--json")), &first))
	out := e.ok("tasks", "create", "--type", "crawl", "--title", "Report", "--depends-on", first.ID+", ", "--on-dependency-failure", "wait")
	require.Contains(t, out, "(blocked, medium)")
	require.Contains(t, out, "Blocked until its 1 dependencies complete.")
	id := strings.TrimSuffix(strings.Fields(out)[2], ":")
	require.NoError(t, json.Unmarshal([]byte(e.ok("tasks", "show", id, "--json")), &waiting))
	require.Equal(t, "blocked", waiting.Status)
	require.Equal(t, []string{first.ID}, waiting.DependsOn)
	require.NotNil(t, waiting.OnDependencyFailure)
	require.Equal(t, "wait", *waiting.OnDependencyFailure)

	require.Contains(t, e.ok("tasks", "release", id, "--reason", "the other crawl is enough"), "Released task "+id+": Report (pending)")
	code, _, errOut := e.taskctl("tasks", "release", id)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "cannot release a task that is pending")

	code, _, errOut = e.taskctl("tasks", "create", "--type", "crawl", "--title", "x", "--on-dependency-failure", "wait")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--on-dependency-failure needs --depends-on")
	code, _, errOut = e.taskctl("tasks", "create", "--type", "crawl", "--title", "x", "--depends-on", first.ID, "--on-dependency-failure", "retry")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "on_dependency_failure")
	code, _, errOut = e.taskctl("tasks", "create", "--type", "crawl", "--title", "x", "--depends-on", "not-a-task")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "depends_on")
}

// The workflows commands against a real server: create from a file (types
// by name), list, show, cancel, and a bad graph refused naming the task.
func TestWorkflowsCommands(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "crawl")
	e.ok("types", "create", "--name", "report")
	dir := t.TempDir()
	file := filepath.Join(dir, "nvda.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"name": "NVDA sentiment", "tasks": [
  {"ref": "reddit", "title": "Crawl Reddit", "task_type": "crawl"},
  {"ref": "stocktwits", "title": "Crawl StockTwits", "task_type": "crawl"},
  {"ref": "report", "title": "Report", "task_type": "report", "depends_on": ["reddit", "stocktwits"]}]}`), 0o600))
	out := e.ok("workflows", "create", file)
	require.Contains(t, out, `Created workflow "NVDA sentiment" with 3 tasks (2 claimable now, 1 blocked)`)
	require.Contains(t, e.ok("workflows", "list"), "0/3 done, 2 pending, 1 blocked")
	var v struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("workflows", "list", "--json")), &[]any{&v}))
	show := e.ok("workflows", "show", v.ID)
	require.Contains(t, show, "report")
	require.Contains(t, show, "reddit,stocktwits")
	require.Contains(t, e.ok("workflows", "cancel", v.ID, "--reason", "test"), "is cancelled")

	bad := filepath.Join(dir, "cycle.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"name": "loop", "tasks": [
  {"ref": "a", "title": "A", "task_type": "crawl", "depends_on": ["b"]},
  {"ref": "b", "title": "B", "task_type": "crawl", "depends_on": ["a"]}]}`), 0o600))
	code, _, errOut := e.taskctl("workflows", "create", bad)
	require.NotZero(t, code)
	require.Contains(t, errOut, "tasks[0].depends_on")
	require.Contains(t, errOut, "cycle")
}
