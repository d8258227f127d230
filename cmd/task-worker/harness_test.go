package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// The tests run the real binaries: task-service against a fresh database
// and task-worker with small shell scripts as commands.

// binDir holds the binaries TestMain builds.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "task-worker-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		for _, pkg := range []string{"task-service", "task-worker"} {
			args := []string{"build", "-o", filepath.Join(dir, pkg)}
			if pkg == "task-worker" && os.Getenv("TASK_WORKER_TEST_RACE") != "" {
				args = append(args, "-race") // the worker binary under the race detector
			}
			cmd := exec.Command("go", append(args, "github.com/clawdbot/task-service/cmd/"+pkg)...)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
				return 1
			}
		}
		return m.Run()
	}())
}

const (
	adminEmail    = "admin@example.com"
	adminPassword = "admin-password-1"
	workerPass    = "worker-password-1"
)

// syncBuffer is a bytes.Buffer safe for a process writer and test readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// service is a running task-service process.
type service struct {
	t    *testing.T
	addr string
	env  []string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func (s *service) base() string { return "http://" + s.addr }

// start runs the service and waits until it answers /healthz.
func (s *service) start() {
	t := s.t
	s.cmd = exec.Command(filepath.Join(binDir, "task-service"))
	s.cmd.Env = append(os.Environ(), s.env...)
	s.logs = &syncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	require.NoError(t, s.cmd.Start())
	s.done = make(chan struct{})
	cmd, done := s.cmd, s.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	eventually(t, 30*time.Second, "task-service answers /healthz", func() bool {
		select {
		case <-done:
			t.Fatalf("task-service exited:\n%s", s.logs.String())
		default:
		}
		resp, err := http.Get(s.base() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// kill stops the service abruptly.
func (s *service) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// fixture is a service on a fresh database, an admin client and a pool
// for SQL checks.
type fixture struct {
	t     *testing.T
	svc   *service
	admin *client.Client
	hc    *http.Client // validates every answer against the document
	pool  *pgxpool.Pool
	dir   string
}

func newFixture(t *testing.T, serviceEnv ...string) *fixture {
	t.Helper()
	dbURL := storetest.NewDB(t)
	svc := &service{t: t, env: append([]string{
		"DATABASE_URL=" + dbURL, "JWT_SECRET=test-secret-0123456789abcdef",
		"ADMIN_EMAIL=" + adminEmail, "ADMIN_PASSWORD=" + adminPassword,
		"BCRYPT_COST=4", "LOG_FORMAT=json", "LOG_LEVEL=warn",
		// The service's own retries and timeouts would race the worker's
		// behaviour under test (retry tasks claimed, a timeout failed first).
		"REACTORS=false", "STUCK_DETECTOR=false",
		"DATA_DIR=" + t.TempDir(),
	}, serviceEnv...)}
	svc.addr = freeAddr(t)
	svc.env = append(svc.env, "LISTEN_ADDR="+svc.addr)
	svc.start()
	t.Cleanup(func() {
		svc.kill()
		if t.Failed() {
			t.Logf("task-service logs:\n%s", tail(svc.logs.String(), 4000))
		}
	})
	ctx := context.Background()
	hc := checkedHTTP(t, svc.base())
	admin := client.New(svc.base(), hc)
	_, err := admin.Login(ctx, adminEmail, adminPassword)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &fixture{t: t, svc: svc, admin: admin, hc: hc, pool: pool, dir: t.TempDir()}
}

// checkedHTTP is an HTTP client whose every answer is validated against the
// OpenAPI document the server at base serves (failures reported when t ends).
func checkedHTTP(t *testing.T, base string) *http.Client {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	doc, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &http.Client{Timeout: 90 * time.Second, Transport: apitest.New(t, doc).Transport(nil)}
}

func (f *fixture) ctx() context.Context { return context.Background() }

// newWorkerAccount creates a worker user that may hold maxTasks at once.
func (f *fixture) newWorkerAccount(name string, maxTasks int) (email, id string) {
	email = name + "@example.com"
	u, err := f.admin.CreateWorker(f.ctx(), client.NewWorker{Email: email, Password: workerPass, FullName: name,
		MaxConcurrentTasks: maxTasks})
	require.NoError(f.t, err)
	return email, u.ID
}

// newType creates a task type; timeout 0 leaves it unset.
func (f *fixture) newType(name string, timeoutSeconds int, sop string) string {
	tt, err := f.admin.CreateTaskType(f.ctx(), client.NewTaskType{Name: name, SOP: sop, TimeoutSeconds: timeoutSeconds})
	require.NoError(f.t, err)
	return tt.ID
}

func (f *fixture) newTask(typeID, title string, params any) string {
	f.t.Helper()
	var p json.RawMessage
	if params != nil {
		var err error
		p, err = json.Marshal(params)
		require.NoError(f.t, err)
	}
	var task *events.Task
	f.asAdmin(func() (err error) {
		task, err = f.admin.CreateTask(f.ctx(), client.NewTask{Title: title, TaskTypeID: typeID, Params: p})
		return err
	})
	return task.ID
}

// asAdmin runs an admin call, logging in again once if the token expired
// (tests with a short TOKEN_TTL).
func (f *fixture) asAdmin(call func() error) {
	f.t.Helper()
	err := call()
	if client.IsStatus(err, http.StatusUnauthorized) {
		_, err = f.admin.Login(f.ctx(), adminEmail, adminPassword)
		require.NoError(f.t, err)
		err = call()
	}
	require.NoError(f.t, err)
}

func (f *fixture) detail(id string) *store.TaskDetail {
	f.t.Helper()
	var d *store.TaskDetail
	f.asAdmin(func() (err error) {
		d, err = f.admin.Task(f.ctx(), id)
		return err
	})
	return d
}

func (f *fixture) task(id string) *events.Task { return &f.detail(id).Task }

// updates is the task's update thread, oldest first.
func (f *fixture) updates(id string) []string {
	var out []string
	for _, u := range f.detail(id).Updates {
		out = append(out, u.Message)
	}
	return out
}

func (f *fixture) eventsOf(id string) []client.Event {
	var evs []client.Event
	f.asAdmin(func() (err error) {
		evs, err = f.admin.TaskEvents(f.ctx(), id)
		return err
	})
	return evs
}

func (f *fixture) waitStatus(id string, status events.Status, within time.Duration) *events.Task {
	f.t.Helper()
	var last *events.Task
	eventually(f.t, within, fmt.Sprintf("task %s becomes %s", id, status), func() bool {
		last = f.task(id)
		return last.Status == status
	})
	return last
}

// script writes an executable shell script into the fixture's dir.
func (f *fixture) script(name, body string) string {
	path := filepath.Join(f.dir, name)
	require.NoError(f.t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

// workerProc is a running task-worker process.
type workerProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// startWorker runs task-worker logged in as email with JSON logs; extra
// args and env come after the defaults, so they win.
func (f *fixture) startWorker(email string, env []string, args ...string) *workerProc {
	f.t.Helper()
	all := append([]string{"--api", f.svc.base(), "--email", email, "--work-dir", filepath.Join(f.dir, "work-"+email),
		"--poll-interval", "100ms", "--poll-jitter", "50ms", "--kill-grace", "1s", "--log-format", "json", "--log-level", "debug"}, args...)
	cmd := exec.Command(filepath.Join(binDir, "task-worker"), all...)
	cmd.Env = append(append(os.Environ(), "TASK_WORKER_PASSWORD="+workerPass, "FIXTURE_DIR="+f.dir), env...)
	w := &workerProc{t: f.t, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.logs, w.logs
	require.NoError(f.t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	f.t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Kill()
			<-w.done
		}
		if f.t.Failed() {
			f.t.Logf("task-worker %s logs:\n%s", email, tail(w.logs.String(), 8000))
		}
	})
	return w
}

func (w *workerProc) signal(sig os.Signal) { require.NoError(w.t, w.cmd.Process.Signal(sig)) }

// wait waits for the worker to exit and returns its exit code.
func (w *workerProc) wait(within time.Duration) int {
	w.t.Helper()
	select {
	case <-w.done:
		return w.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		w.t.Fatalf("task-worker still running after %s", within)
		return -1
	}
}

// logLines are the worker's JSON log lines.
func (w *workerProc) logLines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(w.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (w *workerProc) logged(msg string) bool {
	for _, l := range w.logLines() {
		if l["message"] == msg {
			return true
		}
	}
	return false
}

// eventually polls cond every 20 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processGone reports whether pid no longer runs (absent, or a zombie
// nobody reaped yet).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 10*time.Second, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(string(b), "%d", &pid)
		return err == nil && pid > 0
	})
	return pid
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
