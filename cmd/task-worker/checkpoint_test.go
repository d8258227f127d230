package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
)

// resumeAgent is the command of both attempts: the first saves two
// checkpoints through $TASK_CHECKPOINT and then hangs (until its worker is
// killed); the retry records the checkpoint and the prompt it was given and
// answers with the state it resumed from.
const resumeAgent = `if [ "$TASK_ATTEMPT" = 1 ]; then
  echo '{"session_id": "sess-1", "step": 1}' > "$TASK_CHECKPOINT"
  sleep 0.3
  printf '{\n  "session_id": "sess-1",\n  "step": 2\n}\n' > "$TASK_CHECKPOINT"
  echo "working on step 2"
  exec sleep 300
fi
cp "$TASK_CHECKPOINT" "$FIXTURE_DIR/resumed-checkpoint.json"
cp "$TASK_PROMPT_FILE" "$FIXTURE_DIR/resumed-prompt.md"
printf '{"resumed_from": %s}\n' "$(tr -d '\n' < "$TASK_CHECKPOINT")"
`

// TestAKilledWorkersRetryResumesFromItsLastCheckpoint: a task-worker is
// killed with SIGKILL mid-task, after its agent saved checkpoints through
// $TASK_CHECKPOINT. The stuck detector fails the task (worker_offline), the
// retry reactor creates the retry, and another task-worker's agent finds
// the last checkpoint in its own $TASK_CHECKPOINT and in its prompt. The
// log replays to the same projections.
func TestAKilledWorkersRetryResumesFromItsLastCheckpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "REACTORS=true", "STUCK_DETECTOR=true", "REACTOR_CATCH_UP=1s",
		"STUCK_TICK=200ms", "WORKER_OFFLINE_AFTER=3s", "TASK_STUCK_AFTER=1s")
	crashEmail, crashID := f.newWorkerAccount("crashing", 1)
	rescueEmail, rescueID := f.newWorkerAccount("rescuer", 1)
	retries := 1
	tt, err := f.admin.CreateTaskType(f.ctx(), client.NewTaskType{Name: "agent_session", MaxRetries: &retries})
	require.NoError(t, err)
	taskID := f.newTask(tt.ID, "a long agent session", nil)
	agent := f.script("agent.sh", resumeAgent)

	// task-worker heartbeats every 15 s while busy and 30 s while idle,
	// longer than these thresholds: the test keeps both accounts heard
	// from (every 200 ms, 15 beats within the offline threshold on a
	// loaded machine) until the crash, so only the crash makes a worker
	// silent.
	crashBeats := beatAs(t, f, crashEmail)
	defer beatAs(t, f, rescueEmail)()

	crashing := f.startWorker(crashEmail, nil, "--command", agent, "--checkpoint-every", "100ms")
	var saved *events.TaskCheckpoint
	eventually(t, 30*time.Second, "the agent's second checkpoint is saved", func() bool {
		saved = f.detail(taskID).Checkpoint
		return saved != nil && sameJSON(t, saved.State, `{"session_id": "sess-1", "step": 2}`)
	})
	require.Equal(t, crashID, saved.WorkerID)
	require.Equal(t, 2, saved.Saves, "each change uploaded once")

	require.NoError(t, crashing.cmd.Process.Kill()) // SIGKILL: no release, no last report
	crashing.wait(10 * time.Second)
	crashBeats()

	var retryID string
	eventually(t, 30*time.Second, "the stuck detector fails the task and it is retried", func() bool {
		task := f.task(taskID)
		if task.RetryTaskID != nil {
			retryID = *task.RetryTaskID
		}
		return retryID != ""
	})
	failed := f.task(taskID)
	require.Equal(t, events.StatusFailed, failed.Status)
	require.Equal(t, events.FailureWorkerOffline, *failed.FailureKind)

	f.startWorker(rescueEmail, nil, "--command", agent)
	retry := f.waitStatus(retryID, events.StatusCompleted, 30*time.Second)
	require.Equal(t, &rescueID, retry.AssignedTo)
	require.JSONEq(t, `{"resumed_from": {"session_id": "sess-1", "step": 2}}`, string(retry.Result))
	resumed, err := os.ReadFile(filepath.Join(f.dir, "resumed-checkpoint.json"))
	require.NoError(t, err)
	require.JSONEq(t, `{"session_id": "sess-1", "step": 2}`, string(resumed))
	prompt, err := os.ReadFile(filepath.Join(f.dir, "resumed-prompt.md"))
	require.NoError(t, err)
	require.Contains(t, string(prompt), "## Checkpoint")
	require.Contains(t, string(prompt), `"session_id": "sess-1"`)

	// The retry's agent did not touch the file: nothing more was saved.
	require.Equal(t, taskID, f.detail(retryID).Checkpoint.TaskID)
	var types []string
	for _, e := range f.eventsOf(taskID) {
		if e.Type == "task.checkpointed" || e.Type == "task.failed" {
			types = append(types, e.Type)
		}
	}
	require.Equal(t, []string{"task.checkpointed", "task.checkpointed", "task.failed"}, types)
	rep, err := replay.Verify(f.ctx(), f.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify found differences: %+v", rep.Differences)
}

// beatAs heartbeats as the worker account email every 200 ms until the
// returned stop is called.
func beatAs(t *testing.T, f *fixture, email string) (stop func()) {
	t.Helper()
	c := client.New(f.svc.base(), nil)
	_, err := c.Login(f.ctx(), email, workerPass)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			_ = c.Heartbeat(ctx, client.Heartbeat{Status: "working"})
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(t *testing.T, a json.RawMessage, b string) bool {
	t.Helper()
	var x, y any
	require.NoError(t, json.Unmarshal(a, &x))
	require.NoError(t, json.Unmarshal([]byte(b), &y))
	return reflect.DeepEqual(x, y)
}

// fakeClaude stands in for Claude Code: it records its arguments, and
// answers like `claude -p --output-format json`: a new session (after
// --session-id ID, which it keeps) fails, a resumed one (--resume ID)
// succeeds under a new session id, as Claude Code may give it.
const fakeClaude = `#!/bin/sh
echo "$*" >> "$FIXTURE_DIR/claude-args"
cat > /dev/null
case "$2" in
--session-id) echo '{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"'"$3"'"}'; exit 1 ;;
--resume) echo '{"type":"result","subtype":"success","is_error":false,"result":"fixed","session_id":"sess-after-resume"}' ;;
esac
`

// TestTheClaudeResumeExampleResumesItsSession runs docs/examples/claude-resume.sh
// under task-worker with a stand-in for Claude Code: the first attempt
// starts a session whose id is in its checkpoint before Claude runs; the
// retry resumes that session, and saves the id Claude then reports.
func TestTheClaudeResumeExampleResumesItsSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, _ := f.newWorkerAccount("claude-bot", 1)
	noRetries := 0
	tt, err := f.admin.CreateTaskType(f.ctx(), client.NewTaskType{Name: "fix_bug", MaxRetries: &noRetries})
	require.NoError(t, err)
	bin := filepath.Join(f.dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "claude"), []byte(fakeClaude), 0o755))
	example, err := filepath.Abs("../../docs/examples/claude-resume.sh")
	require.NoError(t, err)

	first := f.newTask(tt.ID, "fix the flaky test", nil)
	f.startWorker(email, []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, "--command", "exec sh "+example)
	f.waitStatus(first, events.StatusFailed, 30*time.Second)
	cp := f.detail(first).Checkpoint
	require.NotNil(t, cp, "the session id was saved")
	var state struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(t, json.Unmarshal(cp.State, &state))
	require.Regexp(t, `^[0-9a-f-]{36}$`, state.SessionID)

	retry, err := f.admin.RetryTask(f.ctx(), first, "")
	require.NoError(t, err)
	done := f.waitStatus(retry.ID, events.StatusCompleted, 30*time.Second)
	require.Contains(t, string(done.Result), `"result":"fixed"`, "Claude Code's JSON answer is the result")
	args, err := os.ReadFile(filepath.Join(f.dir, "claude-args"))
	require.NoError(t, err)
	require.Regexp(t, `^-p --session-id `+state.SessionID+` --output-format json .*\n-p --resume `+state.SessionID+` --output-format json `, string(args))
	require.True(t, sameJSON(t, f.detail(retry.ID).Checkpoint.State, `{"session_id": "sess-after-resume"}`))
}
