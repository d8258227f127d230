package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/store/blob/s3test"
	"github.com/clawdbot/task-service/store/storetest"
)

// binary is the task-service built by TestMain: the tests drive the real
// executable, not run().
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "task-service-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "task-service")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build task-service:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	s3test.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output while it runs.
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

// baseEnv is a clean environment: nothing from the developer's shell (an
// ANTHROPIC_API_KEY, a DATABASE_URL) leaks into the binary under test.
func baseEnv(extra ...string) []string {
	// No daily digest unless a test asks for one (a later DIGEST_AT wins):
	// a test with Telegram on that starts just after 09:00, the default,
	// would get the day's digest among the messages it counts.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LOG_FORMAT=json",
		"DATA_DIR=" + filepath.Join(os.TempDir(), "task-service-e2e-data"), "DIGEST_AT=off"}
	return append(env, extra...)
}

// runCmd runs the binary to completion and returns its exit code and output.
func runCmd(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, exited := err.(*exec.ExitError); !exited {
			t.Fatalf("run %v: %v", args, err)
		}
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// server is a running task-service process.
type server struct {
	cmd  *exec.Cmd
	base string
	logs *syncBuffer
	done chan error
}

// startServer starts the binary on a fresh database and waits for /readyz.
// It listens on 127.0.0.1:0 and the test reads the port from the binary's
// "listening" log line: no window in which another process can take a port
// picked in advance.
// Extra environment entries override the defaults (LISTEN_ADDR to restart on
// the same port).
func startServer(t testing.TB, dbURL string, env ...string) *server {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(binary)
	cmd.Env = append(baseEnv(
		"DATABASE_URL="+dbURL, "LISTEN_ADDR=127.0.0.1:0", "JWT_SECRET=e2e-secret-0123456789abcdef",
		"ADMIN_EMAIL=root@example.com", "ADMIN_PASSWORD=root-password", "BCRYPT_COST=4", "LOG_LEVEL=info",
		"TELEGRAM_ENABLED=false",
	), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, logs: logs, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("task-service output:\n%s", logs.String())
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-s.done:
			t.Fatalf("task-service exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		if s.base == "" {
			s.base = listeningOn(logs.String())
		}
		var err error
		if s.base != "" {
			var resp *http.Response
			if resp, err = http.Get(s.base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return s
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task-service not ready after 30 s (last: %v)\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkedHTTP is an HTTP client whose every answer is validated against
// the OpenAPI document the server at base serves (failures are reported
// when t ends).
func checkedHTTP(t *testing.T, base string, tr http.RoundTripper) *http.Client {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	doc, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &http.Client{Timeout: 90 * time.Second, Transport: apitest.New(t, doc).Transport(tr)}
}

// listeningOn finds the address in the "task-service listening" log line.
func listeningOn(logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Message string `json:"message"`
			Addr    string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "task-service listening" && l.Addr != "" {
			return "http://" + l.Addr
		}
	}
	return ""
}

func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL)

	hc := checkedHTTP(t, s.base, nil)
	admin := client.New(s.base, hc)
	login, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err, "the bootstrap admin from ADMIN_EMAIL/ADMIN_PASSWORD logs in")
	require.True(t, login.User.IsAdmin)

	worker := func(email string, limit int) (*client.Client, string) {
		u, err := admin.CreateWorker(ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: email, MaxConcurrentTasks: limit})
		require.NoError(t, err)
		c := client.New(s.base, hc)
		_, err = c.Login(ctx, email, "worker-password")
		require.NoError(t, err)
		return c, u.ID
	}
	w1, w1ID := worker("one@example.com", 2)
	w2, w2ID := worker("two@example.com", 1)

	retries := 1
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "summarise", SOP: "Summarise the document.",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`), MaxRetries: &retries})
	require.NoError(t, err)
	_, err = admin.CreateTask(ctx, client.NewTask{Title: "no url", TaskTypeID: tt.ID, Params: json.RawMessage(`{}`)})
	require.True(t, client.IsStatus(err, http.StatusBadRequest), "params are checked against the schema: %v", err)

	good, err := admin.CreateTask(ctx, client.NewTask{Title: "summarise A", TaskTypeID: tt.ID, Priority: events.PriorityHigh,
		Params: json.RawMessage(`{"url":"https://example.com/a"}`)})
	require.NoError(t, err)
	bad, err := admin.CreateTask(ctx, client.NewTask{Title: "summarise B", TaskTypeID: tt.ID, Priority: events.PriorityLow,
		Params: json.RawMessage(`{"url":"https://example.com/b"}`), AssignedTo: w2ID, Reason: "w2 has access"})
	require.NoError(t, err)

	require.NoError(t, w1.Heartbeat(ctx, client.Heartbeat{Status: "idle"}))
	got, err := w1.Claim(ctx)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, good.ID, got.ID)
	require.Equal(t, "Summarise the document.", got.TaskType.SOP)
	none, err := w1.Claim(ctx)
	require.NoError(t, err)
	require.Nil(t, none, "the other task is reserved for w2")
	require.NoError(t, w1.PostUpdate(ctx, good.ID, "reading"))
	require.NoError(t, w1.PostResult(ctx, good.ID, map[string]string{"summary": "short"}))
	done, err := w1.Complete(ctx, good.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusCompleted, done.Status)

	got, err = w2.Claim(ctx)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, bad.ID, got.ID)
	failed, err := w2.Fail(ctx, bad.ID, "the URL returns 404")
	require.NoError(t, err)
	require.Equal(t, events.StatusFailed, failed.Status)

	types := func(id string) []string {
		evs, err := admin.TaskEvents(ctx, id)
		require.NoError(t, err)
		out := make([]string, len(evs))
		for i, e := range evs {
			out[i] = e.Type + "/" + string(e.Meta.Actor.Kind)
		}
		return out
	}
	require.Equal(t, []string{"task.created/admin", "task.claimed/worker", "task.update_posted/worker",
		"task.result_posted/worker", "task.completed/worker"}, types(good.ID))
	evs, err := admin.TaskEvents(ctx, good.ID)
	require.NoError(t, err)
	for _, e := range evs[1:] {
		require.Equal(t, w1ID, e.Meta.Actor.ID)
	}

	// The failed task's story starts with what the people did; the retry
	// reactor running in the same binary then decides (max_retries 1).
	want := []string{"task.created/admin", "task.assigned/admin", "task.claimed/worker", "task.failed/worker"}
	require.Equal(t, want, types(bad.ID)[:len(want)])
	var story []string
	start := time.Now()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if story = types(bad.ID); len(story) > len(want) {
			break
		}
	}
	t.Logf("the retry reactor decided after %v", time.Since(start).Round(time.Millisecond))
	require.Greater(t, len(story), len(want), "the retry reactor decided within 60 s (a long transaction anywhere in the cluster holds consumers back)")
	require.Equal(t, want, story[:len(want)])
	require.Equal(t, "task.retried/system", story[len(want)], "max_retries 1: the failure is retried")
	for _, later := range story[len(want)+1:] {
		require.True(t, strings.HasSuffix(later, "/system"), "after the failure only the system acts: %v", story)
	}
	detail, err := admin.Task(ctx, bad.ID)
	require.NoError(t, err)
	require.Len(t, detail.Retries, 1)
	require.Equal(t, 1, detail.Retries[0].RetryCount)
	require.Equal(t, events.StatusPending, detail.Retries[0].Status)

	// The projection equals the fold of the stored events, read straight
	// from the database the binary wrote.
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, id := range []string{good.ID, bad.ID, detail.Retries[0].ID} {
		requireRowIsFold(t, ctx, conn, admin, id)
	}

	st, err := admin.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"blocked": 0.0, "pending": 1.0, "in_progress": 0.0, "completed": 1.0, "failed": 1.0, "cancelled": 0.0}, st["by_status"])

	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	var metrics bytes.Buffer
	_, err = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, metrics.String(), `taskservice_claims_total{outcome="claimed"} 2`)
	require.Regexp(t, `taskservice_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1`, metrics.String())
	require.Regexp(t, `"version":"[^"]+".*"message":"task-service listening"`, s.logs.String(), "the start-up line names the version")

	// SIGTERM: a clean exit, code 0, within 10 s.
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-s.done:
		require.NoError(t, err, "exit after SIGTERM\n%s", s.logs.String())
		require.Equal(t, 0, s.cmd.ProcessState.ExitCode())
	case <-time.After(10 * time.Second):
		t.Fatalf("task-service still running 10 s after SIGTERM\n%s", s.logs.String())
	}
	require.Contains(t, s.logs.String(), `"stopped"`)
	require.NotContains(t, s.logs.String(), `"level":"error"`)
}

// requireRowIsFold compares GET task (the worker_tasks row) with the fold of
// the task's events as stored.
func requireRowIsFold(t *testing.T, ctx context.Context, conn *pgx.Conn, admin *client.Client, id string) {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT seq, stream_type, stream_id::text, version, type, schema_version, data, meta, occurred_at
		FROM task_events WHERE stream_id = $1 ORDER BY version`, id)
	require.NoError(t, err)
	var stream []events.Envelope
	for rows.Next() {
		var e events.Envelope
		require.NoError(t, rows.Scan(&e.Seq, &e.StreamType, &e.StreamID, &e.Version, &e.Type, &e.SchemaVersion, &e.Data, &e.Meta, &e.OccurredAt))
		e.OccurredAt = e.OccurredAt.UTC()
		require.NoError(t, e.Decode())
		stream = append(stream, e)
	}
	require.NoError(t, rows.Err())
	folded := events.FoldTask(stream)
	require.NotNil(t, folded)
	detail, err := admin.Task(ctx, id)
	require.NoError(t, err)
	want, err := json.Marshal(folded)
	require.NoError(t, err)
	got, err := json.Marshal(detail.Task)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "task %s: row vs fold", id)
}

// latestMigration is the highest NNN of the embedded migration files, and
// previous the one before it (0 when there is one): numbers may have gaps.
func latestMigration(t *testing.T) (latest, previous int) {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	sort.Strings(names)
	number := func(name string) int {
		n, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		require.NoError(t, err)
		return n
	}
	latest = number(names[len(names)-1])
	if len(names) > 1 {
		previous = number(names[len(names)-2])
	}
	return latest, previous
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	env := baseEnv("DATABASE_URL=" + dbURL)
	latest, previous := latestMigration(t)
	versionRE := regexp.MustCompile(`version (\d+) dirty=(true|false)`)

	version := func() int {
		t.Helper()
		code, out := runCmd(t, env, "migrate", "version")
		require.Equal(t, 0, code, out)
		m := versionRE.FindStringSubmatch(out)
		require.NotNil(t, m, "migrate version printed %q", out)
		require.Equal(t, "false", m[2])
		v, _ := strconv.Atoi(m[1])
		return v
	}
	hasTable := func(name string) bool {
		t.Helper()
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var ok bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
		return ok
	}

	require.Equal(t, latest, version(), "a storetest database is fully migrated")

	code, out := runCmd(t, env, "migrate", "down")
	require.Equal(t, 0, code, out)
	require.False(t, hasTable("task_events"))
	require.False(t, hasTable("worker_tasks"))
	require.Equal(t, 0, version(), "nothing applied on an empty database")

	code, out = runCmd(t, env, "migrate", "up")
	require.Equal(t, 0, code, out)
	require.True(t, hasTable("task_events"))
	require.Equal(t, latest, version())

	code, out = runCmd(t, env, "migrate", "up")
	require.Equal(t, 0, code, "up twice is a no-op: %s", out)

	if latest > 1 {
		code, out = runCmd(t, env, "migrate", "down", "1")
		require.Equal(t, 0, code, out)
		require.Equal(t, previous, version())
		require.True(t, hasTable("task_events"), "one step down keeps the core")
		code, out = runCmd(t, env, "migrate", "up")
		require.Equal(t, 0, code, out)
		require.Equal(t, latest, version())
	}

	for _, bad := range [][]string{{"migrate"}, {"migrate", "sideways"}, {"migrate", "down", "zero"}, {"migrate", "down", "-2"}} {
		code, out := runCmd(t, env, bad...)
		require.NotEqual(t, 0, code, "%v should fail: %s", bad, out)
		require.NotEmpty(t, strings.TrimSpace(out), "%v fails with a message", bad)
	}
	require.Equal(t, latest, version(), "failed commands changed nothing")
}

func TestHelpAndConfigErrors(t *testing.T) {
	t.Parallel()
	code, out := runCmd(t, baseEnv(), "--help")
	require.Equal(t, 0, code, out)
	for _, want := range []string{"Usage: task-service", "migrate up", "DATABASE_URL", "LISTEN_ADDR", "JWT_SECRET",
		"ADMIN_EMAIL", "ADMIN_PASSWORD", "LOG_LEVEL", "-listen-addr", "Example"} {
		require.Contains(t, out, want)
	}
	code, out = runCmd(t, baseEnv(), "migrate", "-h")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Usage: task-service")

	// An unknown command is a mistake, not a request to serve and migrate.
	code, out = runCmd(t, baseEnv("DATABASE_URL=postgres://127.0.0.1:1/none"), "bogus")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `unknown command "bogus"`)
	require.Contains(t, out, "Usage: task-service")
	require.NotContains(t, out, `"level":`, "nothing ran: no log line, no migration")

	for _, spelling := range []string{"version", "--version", "-version"} {
		code, out = runCmd(t, baseEnv(), spelling)
		require.Equal(t, 0, code, out)
		require.Regexp(t, `(?m)^task-service version \S+\nrevision .+\n`, out, spelling)
		require.Contains(t, out, "module github.com/clawdbot/task-service")
	}

	code, out = runCmd(t, baseEnv(), "openapi")
	require.Equal(t, 0, code, out)
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc), "openapi prints the document as JSON")
	require.Equal(t, "3.0.3", doc.OpenAPI)

	code, out = runCmd(t, baseEnv(), "--no-such-flag")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "no-such-flag")

	code, out = runCmd(t, baseEnv())
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "DATABASE_URL is not set")

	dbURL := storetest.NewDB(t)
	code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL, "LISTEN_ADDR="+freeAddr(t), "JWT_SECRET=short"))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "JWT_SECRET")

	// Every setting is parsed strictly: a value that does not parse stops
	// the start, naming the variable, the value and what is accepted, and
	// nothing is touched (no log line, no migration).
	for env, want := range map[string]string{
		"TOKEN_TTL=7d":                       `TOKEN_TTL="7d": want a duration with a unit, such as 90s, 30m or 24h`,
		"BCRYPT_COST=abc":                    `BCRYPT_COST="abc": want a whole number`,
		"BCRYPT_COST=40":                     `BCRYPT_COST=40: want a whole number from 4 to 31`,
		"REACTORS=maybe":                     `REACTORS="maybe": want true or false (also 1/0, yes/no, on/off)`,
		"LOG_LEVEL=verbose":                  `LOG_LEVEL="verbose": want one of debug, info, warn, error`,
		"TELEGRAM_UPDATES=push":              `TELEGRAM_UPDATES="push": want one of webhook, poll`,
		"STUCK_TICK=-5s":                     `--stuck-tick (STUCK_TICK): is -5s; it must not be negative`,
		"DB_MAX_CONNS=0":                     `DB_MAX_CONNS=0: want at least 1`,
		"SCHEDULE_HISTORY_DAYS=0":            `SCHEDULE_HISTORY_DAYS=0: want a whole number of days, at least 1`,
		"SCHEDULE_HISTORY_RUNS=ten":          `SCHEDULE_HISTORY_RUNS="ten": want a whole number`,
		"SCHEDULE_HISTORY_RUNS=0":            `SCHEDULE_HISTORY_RUNS=0: want a whole number of executions, at least 1`,
		"SCHEDULE_HISTORY_DAYS=1.5":          `SCHEDULE_HISTORY_DAYS="1.5": want a whole number`,
		"SCHEDULE_HISTORY_PRUNE_INTERVAL=0s": `SCHEDULE_HISTORY_PRUNE_INTERVAL=0s: want a duration of at least 1s`,
		"EVENT_RETENTION=12h":                `EVENT_RETENTION=12h: want at least a day (1d), such as 90d; leave it unset to keep every event`,
		"EVENT_RETENTION=0d":                 `EVENT_RETENTION=0d: want at least a day (1d)`,
		"EVENT_RETENTION=soon":               `EVENT_RETENTION="soon": want a number of days such as 90d`,
		"EVENT_PARTITION=month":              `EVENT_PARTITION="month": want one of day, week`,
		"EVENT_COMPACTION_BATCH=0":           `EVENT_COMPACTION_BATCH=0: want a whole number from 1 to 10000`,
		"EVENT_COMPACTION_SHARE=0":           `EVENT_COMPACTION_SHARE=0: want a share of the time from 0.01 to 1`,
		"EVENT_COMPACTION_SHARE=1.5":         `EVENT_COMPACTION_SHARE=1.5: want a share of the time from 0.01 to 1`,
		"EVENT_COMPACTION_INTERVAL=0s":       `EVENT_COMPACTION_INTERVAL=0s: want a duration of at least 1s`,
	} {
		code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL, "LISTEN_ADDR="+freeAddr(t), "JWT_SECRET=e2e-secret-0123456789abcdef", env))
		require.Equal(t, 2, code, out)
		require.Contains(t, out, want, env)
		require.NotContains(t, out, `"level":`, env)
	}
	// A bad variable stops the start even when the command line sets the
	// same setting; the command line is as strict.
	code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL, "TOKEN_TTL=7d"), "--token-ttl", "1h")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `TOKEN_TTL="7d"`)
	code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL), "--bcrypt-cost", "x")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `invalid value "x" for flag -bcrypt-cost`)

	// The digest's settings are checked before anything starts.
	for env, want := range map[string]string{
		"DIGEST_AT=9am":              `DIGEST_AT: \"9am\" is not a time of day: use HH:MM (24-hour), e.g. 09:00, or off`,
		"DIGEST_TZ=Mars/Olympus":     `DIGEST_TZ \"Mars/Olympus\" is not a time zone like Europe/Berlin`,
		"DIGEST_AT=24:00":            `DIGEST_AT: \"24:00\" is not a time of day`,
		"DIGEST_TZ=../../etc/passwd": `DIGEST_TZ \"../../etc/passwd\" is not a time zone`,
		// So are the Telegram commands'.
		"TELEGRAM_ALLOWED_CHAT_IDS=-100,ops": `TELEGRAM_ALLOWED_CHAT_IDS: \"ops\" is not a Telegram id`,
		"TELEGRAM_ADMIN_USER_IDS=0":          `TELEGRAM_ADMIN_USER_IDS: \"0\" is not a Telegram id`,
		"TELEGRAM_WEBHOOK_SECRET=s3cret":     `Telegram commands answer through the notifications' outbox: set TELEGRAM_BOT_TOKEN`,
	} {
		code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL, "LISTEN_ADDR="+freeAddr(t), "JWT_SECRET=e2e-secret-0123456789abcdef", env))
		require.Equal(t, 1, code, out)
		require.Contains(t, out, want, env)
	}
	// LLM usage settings: a mistake stops the start and says which.
	for _, c := range []struct{ env, want string }{
		{"DIGEST_TZ=Mars/Olympus", "DIGEST_TZ"},
		{"DAY_STARTS_AT=25:00", "DAY_STARTS_AT"},
		{`LLM_PRICES={"claude-x": {"input": -1}}`, "LLM_PRICES"},
		{`LLM_PRICES={"claude-x": {"inputs": 1}}`, "LLM_PRICES"},
		{"LLM_PRICES=@/no/such/prices.json", "LLM_PRICES"},
	} {
		code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL, "LISTEN_ADDR="+freeAddr(t), "JWT_SECRET=e2e-secret-0123456789abcdef", c.env))
		require.Equal(t, 1, code, out)
		require.Contains(t, out, c.want, c.env)
	}
}

// rootAdmin is a client of the bootstrap admin (startServer's), logged in,
// its traffic checked against the API contract.
func (s *server) rootAdmin(t *testing.T) *client.Client {
	t.Helper()
	admin := client.New(s.base, checkedHTTP(t, s.base, nil))
	_, err := admin.Login(context.Background(), "root@example.com", "root-password")
	require.NoError(t, err)
	return admin
}
