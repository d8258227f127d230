package ui_test

import (
	"net/http"
	"net/url"
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

// The type form sets, shows and removes the daily budgets; a bad one is
// the field's error and nothing changes.
func TestTypeFormBudgets(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	s.login()
	token := s.csrf()
	resp, body := s.post("/types/new", url.Values{"_csrf": {token}, "name": {"crawl"}, "daily_cost_budget_usd": {"lots"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-daily_cost_budget_usd"[^>]*aria-invalid="true"`, body)
	resp, body = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"crawl"}, "daily_token_budget": {"0"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-daily_token_budget"[^>]*aria-invalid="true"`, body)
	types, err := s.db.ListTaskTypes(s.ctx, true)
	require.NoError(t, err)
	require.Empty(t, types)

	resp, _ = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"crawl"}, "daily_token_budget": {"5000000"}, "daily_cost_budget_usd": {"7.5"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	types, err = s.db.ListTaskTypes(s.ctx, true)
	require.NoError(t, err)
	tt := types[0]
	require.Equal(t, int64(5_000_000), *tt.DailyTokenBudget)
	require.Equal(t, 7.5, *tt.DailyCostBudgetUSD)
	_, body = s.get("/types/" + tt.ID)
	require.Regexp(t, `id="f-daily_cost_budget_usd"[^>]*value="7.5"`, body)
	require.Contains(t, body, `id="llm-tokens">0 of 5000000 budgeted`)
	require.Contains(t, body, `id="llm-cost">0.0000 USD of 7.50 budgeted`)

	resp, _ = s.post("/types/"+tt.ID, url.Values{"_csrf": {token}, "name": {"crawl"}, "max_retries": {"3"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got, err := s.db.GetTaskType(s.ctx, s.db.Pool(), tt.ID)
	require.NoError(t, err)
	require.False(t, got.HasBudget(), "emptied fields remove the budgets")
}
