package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The fixture is a Claude Code `--output-format json` result: a session
// that used two models.
func TestUsageFromClaudeCodesJSONResult(t *testing.T) {
	raw, err := os.ReadFile("testdata/claude-code-result.json")
	require.NoError(t, err)
	u := usageFromOutput(raw)
	require.NotNil(t, u)
	cost := 0.4127385
	require.Equal(t, events.UsageReport{Model: "claude-sonnet-4-5-20250929", InputTokens: 1843 + 9150, OutputTokens: 6120 + 412,
		CacheReadTokens: 412377, CacheWriteTokens: 28411, CostUSD: &cost}, *u,
		"every model's tokens, the costliest model's name, Claude Code's total cost")

	// Without modelUsage (older versions): the session's usage, unnamed.
	u = usageFromOutput([]byte(`{"type":"result","result":"ok","usage":{"input_tokens":5,"output_tokens":7,"cache_read_input_tokens":11,"cache_creation_input_tokens":13}}`))
	require.Equal(t, events.UsageReport{Model: claudeCodeModelName, InputTokens: 5, OutputTokens: 7, CacheReadTokens: 11, CacheWriteTokens: 13}, *u)

	for _, line := range []string{``, `{"from":"stdout"}`, `{"type":"assistant","usage":{"input_tokens":5}}`,
		`{"type":"result","result":"no usage"}`, `{"type":"result","usage":{"input_tokens":-5}}`, `not json`} {
		require.Nil(t, usageFromOutput([]byte(line)), line)
	}
}

// A command that prints Claude Code's JSON result has its usage reported
// with the completion, without doing anything for it.
func TestClaudeCodeUsageIsReportedWithTheCompletion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	email, workerID := f.newWorkerAccount("agent", 1)
	typeID := f.newType("research", 0, "Research the ticker.")
	task := f.newTask(typeID, "NVDA", nil)
	fixture, err := os.ReadFile("testdata/claude-code-result.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.dir+"/result.json", fixture, 0o600))
	cmd := f.script("claude.sh", `cat "$FIXTURE_DIR/result.json"`)
	f.startWorker(email, nil, "--command", cmd)

	f.waitStatus(task, events.StatusCompleted, 20*time.Second)
	var u *store.TaskUsage
	f.asAdmin(func() (err error) {
		u, err = f.admin.TaskLLMUsage(f.ctx(), task)
		return err
	})
	require.Equal(t, int64(1), u.Task.Reports)
	require.Equal(t, int64(1843+9150+6120+412+412377+28411), u.Task.Tokens)
	require.InDelta(t, 0.412739, u.Task.CostUSD, 1e-9, "Claude Code's own total, to the millionth")
	var types []string
	for _, e := range f.eventsOf(task) {
		types = append(types, e.Type)
		if e.Type == "task.usage_reported" {
			require.Equal(t, workerID, e.Actor.ID)
		}
	}
	require.Equal(t, []string{"task.usage_reported", "task.result_posted", "task.completed"}, types[len(types)-3:],
		"reported with the completion, in the same command")
}
