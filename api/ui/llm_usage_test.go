package ui_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// The task page shows the task's LLM usage and its chain's; the type page
// today's usage of the type.
func TestLLMUsageShown(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	tt, task := s.seed()
	w, err := s.db.CreateUser(s.ctx, events.UserRegistered{Email: "agent@example.com", FullName: "Agent", IsWorker: true, MaxConcurrentTasks: 1},
		"agent-password", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	_, _, err = s.db.UpdateTask(s.ctx, s.db.Pool(), task.ID, meta, func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) })
	require.NoError(t, err)
	_, _, err = s.db.ReportUsage(s.ctx, task.ID, w.ID, events.UsageReport{Model: "claude-sonnet-4-5",
		InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 7, CacheWriteTokens: 3}, meta)
	require.NoError(t, err)

	_, body := s.get("/tasks/" + task.ID)
	require.Regexp(t, `id="llm-task"><th>This task</th><td>1</td><td class="num">1100010</td><td class="num">1000000</td><td class="num">100000</td><td class="num">7</td><td class="num">3</td><td class="num">4.5000</td>`, body)
	require.Contains(t, body, `id="llm-chain"><th>Retry chain</th><td>1</td><td class="num">1100010</td>`)

	_, body = s.get("/types/" + tt.ID)
	require.Regexp(t, `id="llm-tokens">1100010 <span class="muted">\(no token budget\)`, body)
	require.Contains(t, body, `id="llm-cost">4.5000 USD`)
}
