package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

func TestRunsTasksAndPostsTheirResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	typeID := f.newType("echo", 0, "Check the SOP marker before anything else.")
	stdoutTask := f.newTask(typeID, "result on stdout", map[string]any{"mode": "stdout"})
	fileTask := f.newTask(typeID, "result in the file", map[string]any{"mode": "file"})
	cmd := f.script("run.sh", `set -e
prompt=$(cat)
case "$prompt" in *"Check the SOP marker"*) ;; *) echo "the prompt lacks the SOP" >&2; exit 3;; esac
[ "$prompt" = "$(cat "$TASK_PROMPT_FILE")" ] || { echo "stdin and the prompt file differ" >&2; exit 4; }
[ -z "$TASK_WORKER_PASSWORD" ] || { echo "the worker password leaked to the command" >&2; exit 5; }
[ "$TASK_TYPE" = echo ] && [ "$TASK_API" = "$EXPECT_API" ] && [ -n "$TASK_TOKEN" ] || { env >&2; exit 6; }
echo "$TASK_TOKEN" > "$FIXTURE_DIR/token"
echo "progress: starting $TASK_ID"
if grep -q '"mode": "file"' "$TASK_PARAMS_FILE"; then
  echo '{"from":"stdout"}'
  printf '{"from":"file","id":"%s"}' "$TASK_ID" > "$TASK_RESULT_FILE"
else
  echo '{"from":"earlier"}'
  printf '{"from":"stdout","id":"%s","attempt":%s}\n' "$TASK_ID" "$TASK_ATTEMPT"
fi
echo "progress: done"
`)
	f.startWorker(email, []string{"EXPECT_API=" + f.svc.base()}, "--command", cmd)

	got := f.waitStatus(stdoutTask, events.StatusCompleted, 20*time.Second)
	require.JSONEq(t, fmt.Sprintf(`{"from":"stdout","id":%q,"attempt":1}`, stdoutTask), string(got.Result),
		"the last JSON object printed is the result")
	got = f.waitStatus(fileTask, events.StatusCompleted, 20*time.Second)
	require.JSONEq(t, fmt.Sprintf(`{"from":"file","id":%q}`, fileTask), string(got.Result), "the result file wins over stdout")

	lines := strings.Split(strings.Join(f.updates(stdoutTask), "\n"), "\n")
	require.Equal(t, []string{"progress: starting " + stdoutTask, `{"from":"earlier"}`,
		fmt.Sprintf(`{"from":"stdout","id":%q,"attempt":1}`, stdoutTask), "progress: done"}, lines)

	// The token handed to the command works against the API.
	tok, err := os.ReadFile(filepath.Join(f.dir, "token"))
	require.NoError(t, err)
	c := client.New(f.svc.base(), f.hc)
	c.SetToken(strings.TrimSpace(string(tok)))
	mine, err := c.MyTasks(f.ctx(), true)
	require.NoError(t, err)
	require.Len(t, mine, 2)
}

func TestAFailingCommandFailsTheTaskWithItsStderrTail(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("build", 0, ""), "build it", nil)
	cmd := f.script("fail.sh", `i=0
while [ $i -lt 200 ]; do echo "noise line $i with some padding to make stderr long" >&2; i=$((i+1)); done
printf 'nul:\000: bad utf8:\377:\n' >&2
echo "fatal: the repository is gone" >&2
exit 3
`)
	f.startWorker(email, nil, "--command", cmd)
	got := f.waitStatus(id, events.StatusFailed, 20*time.Second)
	require.Equal(t, events.FailureError, *got.FailureKind)
	reason := *got.FailureReason
	require.True(t, strings.HasPrefix(reason, "exit status 3: "), reason)
	require.True(t, strings.HasSuffix(reason, "fatal: the repository is gone"), reason)
	// 2 KB of stderr; the one invalid byte became a 3-byte U+FFFD.
	require.LessOrEqual(t, len(reason), len("exit status 3: ")+stderrTail+2, "only the tail of stderr")
	require.NotContains(t, reason, "noise line 0 ")
	require.Contains(t, reason, "nul:: bad utf8:\uFFFD:", "NUL and broken UTF-8, which the service refuses, are cleaned")
}

func TestAFloodOfOutputIsBatchedAndNothingIsLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("chatty", 0, ""), "print a lot", nil)
	const n = 10000
	cmd := f.script("flood.sh", fmt.Sprintf(`awk 'BEGIN { for (i = 0; i < %d; i++) print "line " i }'`, n))
	w := f.startWorker(email, nil, "--command", cmd)
	f.waitStatus(id, events.StatusCompleted, 30*time.Second)

	updates := f.updates(id)
	got := strings.Split(strings.Join(updates, "\n"), "\n")
	want := make([]string, n)
	for i := range want {
		want[i] = "line " + strconv.Itoa(i)
	}
	require.Equal(t, want, got, "every line, in order, nothing omitted")
	// One update per post: ~110 KB of output in 8 KB updates, not 10,000
	// (or 200 batches of 50 lines).
	require.Less(t, len(updates), n/100, "update requests: %d", len(updates))
	for _, u := range updates {
		require.LessOrEqual(t, len(u), 8<<10)
	}
	eventually(t, 5*time.Second, "the worker logs the task's end", func() bool { return w.logged("task finished") })
	for _, l := range w.logLines() {
		if l["message"] == "task finished" {
			require.EqualValues(t, n, l["lines"])
			require.EqualValues(t, len(updates), l["updates"])
			require.EqualValues(t, 0, l["lines_omitted"])
		}
	}
}

func TestATimeoutKillsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("slow", 2, ""), "never ends", nil)
	// The script and its child ignore SIGTERM, so only the SIGKILL after
	// --kill-grace ends them.
	cmd := f.script("hang.sh", `trap '' TERM
sleep 300 &
echo $! > "$FIXTURE_DIR/child.pid"
echo $$ > "$FIXTURE_DIR/leader.pid"
wait
`)
	w := f.startWorker(email, nil, "--command", cmd)
	leader := readPid(t, filepath.Join(f.dir, "leader.pid"))
	child := readPid(t, filepath.Join(f.dir, "child.pid"))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL); _ = syscall.Kill(leader, syscall.SIGKILL) })

	got := f.waitStatus(id, events.StatusFailed, 20*time.Second)
	require.Equal(t, events.FailureTimeout, *got.FailureKind)
	require.Contains(t, *got.FailureReason, "timed out after 2s (timeout from the task type)")
	eventually(t, 5*time.Second, "the script and its child are dead", func() bool {
		return processGone(leader) && processGone(child)
	})
	require.True(t, w.logged("command ignored SIGTERM; sending SIGKILL"))
}

func TestSIGTERMLetsShortTasksFinishAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, workerID := f.newWorkerAccount("bot", 2)
	typeID := f.newType("sleepy", 0, "")
	short := f.newTask(typeID, "short", map[string]int{"sleep": 1})
	long := f.newTask(typeID, "long", map[string]int{"sleep": 300})
	cmd := f.script("sleep.sh", `s=$(sed -n 's/.*"sleep": \([0-9]*\).*/\1/p' "$TASK_PARAMS_FILE")
echo $$ > "$FIXTURE_DIR/$TASK_ID.pid"
sleep "$s"
echo "{\"slept\":$s}"
`)
	w := f.startWorker(email, nil, "--command", cmd, "--slots", "2", "--grace", "3s")
	readPid(t, filepath.Join(f.dir, short+".pid"))
	longPid := readPid(t, filepath.Join(f.dir, long+".pid"))

	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(20*time.Second))

	require.Equal(t, events.StatusCompleted, f.task(short).Status, "finished within the grace period")
	got := f.task(long)
	require.Equal(t, events.StatusPending, got.Status, "released, not failed and not lost")
	require.Nil(t, got.AssignedTo)
	evs := f.eventsOf(long)
	last := evs[len(evs)-1]
	require.Equal(t, "task.released", last.Type)
	require.Contains(t, string(last.Data), "grace period")
	require.True(t, processGone(longPid))

	var status string
	require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT heartbeat_status FROM users WHERE id = $1`, workerID).Scan(&status))
	require.Equal(t, "offline", status, "the last heartbeat says offline")
}

func TestTheWorkerOutlivesAServiceRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("steady", 0, ""), "survive", nil)
	cmd := f.script("steady.sh", `echo $$ > "$FIXTURE_DIR/started"
echo before
while [ ! -f "$FIXTURE_DIR/go" ]; do sleep 0.05; done
echo after
echo '{"survived":true}'
`)
	w := f.startWorker(email, nil, "--command", cmd)
	readPid(t, filepath.Join(f.dir, "started"))
	f.svc.kill()
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "go"), nil, 0o600))
	eventually(t, 20*time.Second, "the worker fails to report and backs off", func() bool {
		for _, l := range w.logLines() {
			if l["message"] == "API call failed; will retry" && (l["call"] == "post result" || l["call"] == "post update") {
				return true
			}
		}
		return false
	})
	f.svc.start()
	got := f.waitStatus(id, events.StatusCompleted, 30*time.Second)
	require.JSONEq(t, `{"survived":true}`, string(got.Result))
	require.Equal(t, []string{"before", "after", `{"survived":true}`},
		strings.Split(strings.Join(f.updates(id), "\n"), "\n"), "output printed while the service was down is posted")
}

func TestTheWorkerLogsInAgainWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "TOKEN_TTL=2s")
	email, _ := f.newWorkerAccount("bot", 1)
	typeID := f.newType("patient", 0, "")
	first := f.newTask(typeID, "outlasts the token", nil)
	cmd := f.script("wait.sh", `sleep 3; echo '{"ok":true}'`)
	w := f.startWorker(email, nil, "--command", cmd)
	f.waitStatus(first, events.StatusCompleted, 30*time.Second)
	require.True(t, w.logged("logged in again (token expired or was refused)"))
	second := f.newTask(typeID, "after another expiry", nil)
	f.waitStatus(second, events.StatusCompleted, 30*time.Second)
}

func TestTwoWorkersWithTwoSlotsDoAHundredTasksExactlyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// The accounts would allow 10 tasks at once: the slots are what limit them.
	emailA, idA := f.newWorkerAccount("bot-a", 10)
	emailB, idB := f.newWorkerAccount("bot-b", 10)
	typeID := f.newType("quick", 0, "")
	const n = 100
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.newTask(typeID, fmt.Sprintf("task %d", i), map[string]int{"i": i})
	}
	cmd := f.script("quick.sh", `d="$FIXTURE_DIR/running-$WORKER_NAME"
mkdir -p "$d"
touch "$d/$TASK_ID"
ls "$d" | wc -l >> "$FIXTURE_DIR/concurrency-$WORKER_NAME"
echo "$TASK_ID" >> "$FIXTURE_DIR/done"
sleep 0.05
rm "$d/$TASK_ID"
echo "{\"worker\":\"$WORKER_NAME\"}"
`)

	// Sample the service's view while they work: never more than 2 in progress per worker.
	var mu sync.Mutex
	maxHeld := map[string]int{}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rows, err := f.pool.Query(f.ctx(), `SELECT assigned_to::text, count(*) FROM worker_tasks
				WHERE status = 'in_progress' GROUP BY 1`)
			if err != nil {
				continue
			}
			for rows.Next() {
				var w string
				var c int
				if rows.Scan(&w, &c) == nil {
					mu.Lock()
					maxHeld[w] = max(maxHeld[w], c)
					mu.Unlock()
				}
			}
			rows.Close()
			time.Sleep(5 * time.Millisecond)
		}
	}()

	f.startWorker(emailA, []string{"WORKER_NAME=a"}, "--command", cmd, "--slots", "2")
	f.startWorker(emailB, []string{"WORKER_NAME=b"}, "--command", cmd, "--slots", "2")
	eventually(t, 90*time.Second, "all tasks completed", func() bool {
		var done int
		require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT count(*) FROM worker_tasks WHERE status = 'completed'`).Scan(&done))
		return done == n
	})
	close(stop)
	<-sampled

	runs, err := os.ReadFile(filepath.Join(f.dir, "done"))
	require.NoError(t, err)
	ran := strings.Fields(string(runs))
	require.Len(t, ran, n, "each task ran exactly once")
	sort.Strings(ran)
	sorted := slices.Clone(ids)
	sort.Strings(sorted)
	require.Equal(t, sorted, ran)

	var claims, completions int
	require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT count(*) FILTER (WHERE type = 'task.claimed'),
		count(*) FILTER (WHERE type = 'task.completed') FROM task_events`).Scan(&claims, &completions))
	require.Equal(t, n, claims, "claimed once each")
	require.Equal(t, n, completions)

	mu.Lock()
	require.LessOrEqual(t, maxHeld[idA], 2, "in progress at once, as the service saw it")
	require.LessOrEqual(t, maxHeld[idB], 2)
	mu.Unlock()
	for _, name := range []string{"a", "b"} {
		b, err := os.ReadFile(filepath.Join(f.dir, "concurrency-"+name))
		if os.IsNotExist(err) {
			continue // that worker got nothing: fine, the other did it all
		}
		require.NoError(t, err)
		for _, c := range strings.Fields(string(b)) {
			running, err := strconv.Atoi(c)
			require.NoError(t, err)
			require.LessOrEqual(t, running, 2, "commands running at once on worker %s", name)
		}
	}
}

func TestARestartReleasesTasksLeftByACrash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("fragile", 0, ""), "interrupted by a crash", nil)
	cmd := f.script("once.sh", `if [ ! -f "$FIXTURE_DIR/crashed-once" ]; then
  touch "$FIXTURE_DIR/crashed-once"
  echo $$ > "$FIXTURE_DIR/first.pid"
  exec sleep 300
fi
echo '{"second_try":true}'
`)
	w := f.startWorker(email, nil, "--command", cmd)
	first := readPid(t, filepath.Join(f.dir, "first.pid"))
	require.NoError(t, w.cmd.Process.Kill()) // a crash: no shutdown, the task stays in progress
	w.wait(10 * time.Second)
	require.Equal(t, events.StatusInProgress, f.task(id).Status)

	f.startWorker(email, nil, "--command", cmd)
	eventually(t, 10*time.Second, "the next start kills what the crashed run left running", func() bool {
		return processGone(first)
	})
	got := f.waitStatus(id, events.StatusCompleted, 20*time.Second)
	require.JSONEq(t, `{"second_try":true}`, string(got.Result))
	var released []string
	for _, e := range f.eventsOf(id) {
		if e.Type == "task.released" {
			var d struct{ Reason string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			released = append(released, d.Reason)
		}
	}
	require.Equal(t, []string{reasonRestarted}, released)
}

func TestWorkersMayFailWithKindErrorOrTimeoutOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 3)
	typeID := f.newType("any", 0, "")
	for range 2 {
		f.newTask(typeID, "t", nil)
	}
	c := client.New(f.svc.base(), f.hc)
	_, err := c.Login(f.ctx(), email, workerPass)
	require.NoError(t, err)
	a, err := c.Claim(f.ctx())
	require.NoError(t, err)
	b, err := c.Claim(f.ctx())
	require.NoError(t, err)

	_, err = c.FailKind(f.ctx(), a.ID, events.FailureWorkerOffline, "not mine to say")
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Equal(t, "kind", apiErr.Field)
	err = c.Do(f.ctx(), http.MethodPut, "/api/v1/worker/tasks/"+a.ID+"/status",
		map[string]string{"status": "completed", "kind": "timeout"}, nil)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "kind", apiErr.Field)

	got, err := c.FailKind(f.ctx(), a.ID, events.FailureTimeout, "too slow")
	require.NoError(t, err)
	require.Equal(t, events.FailureTimeout, *got.FailureKind)
	got, err = c.Fail(f.ctx(), b.ID, "plain")
	require.NoError(t, err)
	require.Equal(t, events.FailureError, *got.FailureKind, "kind defaults to error")
}

func TestAStoppedCommandsWholeGroupGetsTheGracePeriod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("tidy", 1, ""), "cleans up on SIGTERM", nil)
	// The shells die at once on SIGTERM; the program they started traps it
	// and needs a moment to clean up: it must get it, not an early SIGKILL.
	cmd := f.script("tidy.sh", `sh -c 'trap "sleep 0.3; echo cleaned > \"$FIXTURE_DIR/cleaned\"; exit 0" TERM
while :; do sleep 0.1; done' &
wait
`)
	w := f.startWorker(email, nil, "--command", cmd, "--kill-grace", "3s")
	got := f.waitStatus(id, events.StatusFailed, 20*time.Second)
	require.Equal(t, events.FailureTimeout, *got.FailureKind)
	b, err := os.ReadFile(filepath.Join(f.dir, "cleaned"))
	require.NoError(t, err, "the trap ran to its end")
	require.Equal(t, "cleaned\n", string(b))
	require.False(t, w.logged("command ignored SIGTERM; sending SIGKILL"))
}

func TestTheShellScriptExampleRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	typeID := f.newType("disk_usage", 0, "")
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "some-file"), make([]byte, 64<<10), 0o600))
	id := f.newTask(typeID, "measure the fixture", map[string]string{"path": f.dir})
	bad := f.newTask(typeID, "no path", map[string]string{})
	script, err := filepath.Abs("../../docs/examples/handle-task.sh")
	require.NoError(t, err)
	// The example config as shipped; only the script's location differs here.
	f.startWorker(email, nil, "--config", "../../docs/examples/shell.json", "--command", "exec "+script,
		"--work-dir", filepath.Join(f.dir, "work"))

	got := f.waitStatus(id, events.StatusCompleted, 20*time.Second)
	var res struct {
		Path     string `json:"path"`
		TotalKiB int    `json:"total_kib"`
	}
	require.NoError(t, json.Unmarshal(got.Result, &res))
	require.Equal(t, f.dir, res.Path)
	require.GreaterOrEqual(t, res.TotalKiB, 64)
	updates := strings.Join(f.updates(id), "\n")
	require.Contains(t, updates, "measuring "+f.dir)
	if _, err := exec.LookPath("curl"); err == nil {
		require.Contains(t, updates, "posted directly by handle-task.sh", "the command used TASK_TOKEN itself")
	}
	failed := f.waitStatus(bad, events.StatusFailed, 20*time.Second)
	require.Equal(t, "exit status 2: params.path is required", *failed.FailureReason)
}

func TestASecondSignalSkipsTheGracePeriod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("endless", 0, ""), "would take forever", nil)
	cmd := f.script("endless.sh", `echo $$ > "$FIXTURE_DIR/pid"
exec sleep 300
`)
	w := f.startWorker(email, nil, "--command", cmd, "--grace", "5m")
	pid := readPid(t, filepath.Join(f.dir, "pid"))
	w.signal(syscall.SIGTERM)
	eventually(t, 10*time.Second, "the worker acknowledges the first signal", func() bool {
		return w.logged("shutting down: no new claims; running tasks may finish within the grace period (signal again to stop them now)")
	})
	w.signal(syscall.SIGINT)
	require.Equal(t, 0, w.wait(20*time.Second))
	require.Equal(t, events.StatusPending, f.task(id).Status)
	require.True(t, processGone(pid))
}

func TestALongPollClaimPicksUpANewTaskAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	typeID := f.newType("later", 0, "")
	// Polling every hour: only the long-poll can deliver the task in time.
	f.startWorker(email, nil, "--command", `echo '{"ok":true}'`, "--poll-interval", "1h", "--claim-wait", "30s")
	eventually(t, 10*time.Second, "the worker's claim waits on the server", func() bool {
		resp, err := http.Get(f.svc.base() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\ntaskservice_claim_waiters 1\n")
	})
	id := f.newTask(typeID, "arrives while the worker waits", nil)
	f.waitStatus(id, events.StatusCompleted, 10*time.Second)
}

func TestHeartbeatsOfManyBusySlotsStayWithinTheMetadataLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const slots = maxSlots
	email, workerID := f.newWorkerAccount("bot", slots)
	typeID := f.newType("wide", 0, "")
	for i := range slots {
		f.newTask(typeID, fmt.Sprintf("%02d %s", i, strings.Repeat("é", 400)), nil)
	}
	cmd := f.script("hold.sh", `exec sleep 60`)
	w := f.startWorker(email, nil, "--command", cmd, "--slots", strconv.Itoa(slots))
	eventually(t, 30*time.Second, "a heartbeat reports every slot working", func() bool {
		var meta []byte
		var status *string
		require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT heartbeat_status, heartbeat_metadata FROM users WHERE id = $1`,
			workerID).Scan(&status, &meta))
		return status != nil && *status == "working" && strings.Contains(string(meta), fmt.Sprintf(`"working": %d`, slots)) ||
			strings.Count(string(meta), `"status": "working"`) == slots
	})
	require.False(t, w.logged("heartbeat failed"))
}

func TestARetryGetsThePreviousAttemptsInItsPrompt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	noRetries := 0
	tt, err := f.admin.CreateTaskType(f.ctx(), client.NewTaskType{Name: "flaky", MaxRetries: &noRetries})
	require.NoError(t, err)
	first := f.newTask(tt.ID, "needs two tries", nil)
	cmd := f.script("flaky.sh", `if [ "$TASK_ATTEMPT" = 1 ]; then
  echo "tried the obvious fix"
  echo "first try broke: disk full" >&2
  exit 1
fi
cat > "$FIXTURE_DIR/prompt-$TASK_ATTEMPT.md"
echo '{"fixed":true}'
`)
	f.startWorker(email, nil, "--command", cmd)
	f.waitStatus(first, events.StatusFailed, 20*time.Second)

	var retry events.Task
	f.asAdmin(func() error {
		return f.admin.Do(f.ctx(), http.MethodPost, "/api/v1/admin/workers/tasks/"+first+"/retry",
			map[string]string{"hint": "free some space before building"}, &retry)
	})
	f.waitStatus(retry.ID, events.StatusCompleted, 20*time.Second)
	prompt, err := os.ReadFile(filepath.Join(f.dir, "prompt-2.md"))
	require.NoError(t, err)
	t.Logf("the retry's prompt:\n%s", prompt)
	for _, want := range []string{"Attempt: 2", "Retry of task: " + first, "## Previous attempts", "### Attempt 1",
		"status: failed", "failure_kind: error", "first try broke: disk full", "free some space before building",
		"tried the obvious fix"} {
		require.Contains(t, string(prompt), want)
	}
}

// TestFreeSlotsAreClaimedAndReportedTogether runs one worker with 8 slots:
// its first claim asks for all 8 and gets them in one request (one claim
// statement: one transaction), and commands that end together are reported
// in fewer requests than tasks.
func TestFreeSlotsAreClaimedAndReportedTogether(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot-wide", 8)
	typeID := f.newType("together", 0, "")
	const n = 16
	for i := range n {
		f.newTask(typeID, fmt.Sprintf("task %d", i), map[string]int{"i": i})
	}
	cmd := f.script("wait.sh", `while [ ! -f "$FIXTURE_DIR/go" ]; do sleep 0.02; done`)
	f.startWorker(email, nil, "--command", cmd, "--slots", "8")
	eventually(t, 60*time.Second, "8 tasks in progress", func() bool {
		var running int
		require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT count(*) FROM worker_tasks WHERE status = 'in_progress'`).Scan(&running))
		return running == 8
	})
	var firstTx int
	require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT count(*) FROM task_events WHERE type = 'task.claimed'
		AND tx_id = (SELECT min(tx_id) FROM task_events WHERE type = 'task.claimed')`).Scan(&firstTx))
	require.Equal(t, 8, firstTx, "the first claim took all eight free slots at once")

	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "go"), nil, 0o644))
	eventually(t, 60*time.Second, "all tasks completed", func() bool {
		var done int
		require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT count(*) FROM worker_tasks WHERE status = 'completed'`).Scan(&done))
		return done == n
	})
	resp, err := http.Get(f.svc.base() + "/metrics")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	requests := func(path string) int {
		total := 0
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "taskservice_http_requests_total{") && strings.Contains(line, `route="`+path+`"`) {
				fields := strings.Fields(line)
				v, err := strconv.Atoi(fields[len(fields)-1])
				require.NoError(t, err, line)
				total += v
			}
		}
		return total
	}
	claims, reports := requests("/api/v1/worker/tasks/claims"), requests("/api/v1/worker/tasks/completions")
	t.Logf("%d tasks: %d claim requests, %d completion requests", n, claims, reports)
	require.Zero(t, requests("/api/v1/worker/tasks/claim"), "no single claims")
	require.Zero(t, requests("/api/v1/worker/tasks/:id/status"), "no single completions")
	require.Less(t, claims, n)
	require.Positive(t, reports)
	require.Less(t, reports, n, "some commands that ended together were reported in one request")
}

func TestOutputFilesAreUploadedAsTaskData(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("collector", 1)
	typeID := f.newType("crawl", 0, "")
	ok := f.newTask(typeID, "collects and succeeds", map[string]any{"mode": "ok"})
	cmd := f.script("collect.sh", `set -e
mkdir -p "$TASK_OUTPUT_DIR/posts"
printf '{"id":1}\n{"id":2}\n' > "$TASK_OUTPUT_DIR/posts/nvda.jsonl"
echo "847 posts" > "$TASK_OUTPUT_DIR/summary.txt"
echo '{"posts":847}'
`)
	f.startWorker(email, nil, "--command", cmd)
	f.waitStatus(ok, events.StatusCompleted, 20*time.Second)
	var data []events.TaskData
	f.asAdmin(func() error {
		var err error
		data, err = f.admin.TaskData(f.ctx(), ok)
		return err
	})
	require.Len(t, data, 2)
	byName := map[string]events.TaskData{}
	for _, d := range data {
		byName[d.DataType+"/"+d.Filename] = d
	}
	require.Contains(t, byName, "posts/nvda.jsonl")
	require.Contains(t, byName, "output/summary.txt")
	require.EqualValues(t, len("{\"id\":1}\n{\"id\":2}\n"), byName["posts/nvda.jsonl"].Size)
	// Uploaded before the completion: every data event comes before task.completed.
	var dataAfter int
	require.NoError(t, f.pool.QueryRow(f.ctx(), `SELECT count(*) FROM task_events d WHERE d.stream_id = $1 AND d.type = 'task.data_uploaded'
		AND d.version > (SELECT version FROM task_events c WHERE c.stream_id = $1 AND c.type = 'task.completed')`, ok).Scan(&dataAfter))
	require.Zero(t, dataAfter)
}

// An update whose answer is lost (the service wrote it, the connection
// dropped before the answer) is sent again with the same Idempotency-Key,
// and the service answers it without posting the message twice.
func TestALostAnswerDoesNotPostAnUpdateTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("talker", 0, ""), "say one thing", nil)
	target, err := url.Parse(f.svc.base())
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	var dropped, keyed atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/updates") {
			forward.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Idempotency-Key") != "" {
			keyed.Add(1)
		}
		if dropped.Add(1) > 1 {
			forward.ServeHTTP(w, r)
			return
		}
		// The first update reaches the service; its answer is lost.
		forward.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(proxy.Close)

	cmd := f.script("hello.sh", `echo "hello once"`)
	f.startWorker(email, nil, "--command", cmd, "--api", proxy.URL)
	f.waitStatus(id, events.StatusCompleted, 60*time.Second)
	require.Equal(t, []string{"hello once"}, f.updates(id))
	require.GreaterOrEqual(t, dropped.Load(), int64(2), "the update was sent again")
	require.Equal(t, dropped.Load(), keyed.Load(), "every attempt carried the key")
}

// A task the service has in progress under the worker, which does not run
// it (its completion was lost in a failover to a lagging standby, say), is
// given back after the worker's next heartbeat, though no claim failed.
func TestATaskTheServiceHoldsButTheWorkerDoesNotRunIsGivenBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 2)
	typeID := f.newType("gated", 0, "")
	first := f.newTask(typeID, "runs until told", nil)
	cmd := f.script("gate.sh", `while [ ! -f "$FIXTURE_DIR/go" ]; do sleep 0.1; done; echo '{}'`)
	f.startWorker(email, nil, "--command", cmd, "--slots", "1", "--claim-wait", "1s")
	f.waitStatus(first, events.StatusInProgress, 20*time.Second)

	// The same login claims one more behind the process's back: the
	// service holds it under the worker, which never heard of it.
	orphan := f.newTask(typeID, "held by the service only", nil)
	c := client.New(f.svc.base(), f.hc)
	_, err := c.Login(f.ctx(), email, workerPass)
	require.NoError(t, err)
	got, err := c.Claim(f.ctx())
	require.NoError(t, err)
	require.Equal(t, orphan, got.ID)

	// The slot frees (a heartbeat follows) and claims again: nothing fails.
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "go"), nil, 0o644))
	f.waitStatus(first, events.StatusCompleted, 20*time.Second)
	f.waitStatus(orphan, events.StatusCompleted, 10*time.Second) // given back, claimed again, run
	var released []string
	for _, e := range f.eventsOf(orphan) {
		if e.Type == "task.released" {
			var d struct{ Reason string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			released = append(released, d.Reason)
		}
	}
	require.Equal(t, []string{reasonNotHeld}, released)
}

// An outcome the batched report answers with an item of its own that says
// 503 (the database went away under that item, as in a failover) is sent
// again until it is settled: the task completes and runs once.
func TestAnOutcomeAnsweredUnavailableInTheBatchIsSentAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bot", 1)
	id := f.newTask(f.newType("quick", 0, ""), "finish once", nil)
	target, err := url.Parse(f.svc.base())
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	var answered atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/worker/tasks/completions") || answered.Add(1) > 1 {
			forward.ServeHTTP(w, r)
			return
		}
		// The first report is not forwarded: its item is answered 503.
		var items []client.Finish
		require.NoError(t, json.NewDecoder(r.Body).Decode(&items))
		out := make([]map[string]any, len(items))
		for i, it := range items {
			out[i] = map[string]any{"id": it.ID, "status": http.StatusServiceUnavailable, "success": false,
				"error": map[string]string{"code": "unavailable", "message": "the database is unavailable; retry later"}}
		}
		w.Header().Set("Content-Type", "application/json")
		require.NoError(t, json.NewEncoder(w).Encode(map[string]any{"success": true, "data": out}))
	}))
	t.Cleanup(proxy.Close)

	cmd := f.script("once.sh", `echo "$TASK_ID" >> "$FIXTURE_DIR/runs"; echo '{}'`)
	f.startWorker(email, nil, "--command", cmd, "--api", proxy.URL)
	f.waitStatus(id, events.StatusCompleted, 30*time.Second)
	runs, err := os.ReadFile(filepath.Join(f.dir, "runs"))
	require.NoError(t, err)
	require.Equal(t, []string{id}, strings.Fields(string(runs)), "ran once")
	require.GreaterOrEqual(t, answered.Load(), int64(1), "the batched report was answered 503 for the item")
}
