package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// requireAPIError checks that err is the API's answer with status, code and
// the field at fault.
func requireAPIError(t *testing.T, err error, status int, code, field string) {
	t.Helper()
	var ae *client.Error
	require.True(t, errors.As(err, &ae), "want an API error, got %v", err)
	require.Equal(t, status, ae.Status, ae.Error())
	require.Equal(t, code, ae.Code, ae.Error())
	if field != "" {
		require.Equal(t, field, ae.Field, ae.Error())
	}
}

// A worker reports usage on the task it holds, by the usage route and in
// its completion; the totals of the task, its retry chain, its type's day
// and the event log agree, the price table prices what came without a
// cost, and an unknown model is recorded at cost 0 and counted as such.
func TestLLMUsageReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "research")
	w := b.newWorker(t, "Genesis", 2)
	task := b.newTask(t, tt, "NVDA", events.PriorityHigh, "")
	claimed, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, claimed.ID)

	// 1M input and 1M output tokens of Sonnet 4.5: 3 + 15 USD by the table.
	_, err = w.ReportUsage(b.ctx, task.ID, events.UsageReport{Model: "claude-sonnet-4-5-20250929",
		InputTokens: 1_000_000, OutputTokens: 1_000_000})
	require.NoError(t, err)
	cost := 0.25
	_, err = w.ReportUsage(b.ctx, task.ID, events.UsageReport{Model: "claude-haiku-4-5", InputTokens: 10, CostUSD: &cost})
	require.NoError(t, err)
	_, err = w.FinishWithUsage(b.ctx, task.ID, events.StatusFailed, "rate limited",
		events.UsageReport{Model: "mystery-model", InputTokens: 5, OutputTokens: 7, CacheReadTokens: 11, CacheWriteTokens: 13})
	require.NoError(t, err)

	u, err := b.admin.TaskLLMUsage(b.ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, task.ID, u.RootTaskID)
	require.Equal(t, int64(3), u.Task.Reports)
	require.Equal(t, int64(1), u.Task.UnpricedReports, "the unknown model")
	require.Equal(t, int64(1_000_015), u.Task.InputTokens)
	require.Equal(t, int64(1_000_007), u.Task.OutputTokens)
	require.Equal(t, int64(2_000_046), u.Task.Tokens)
	require.InDelta(t, 18.25, u.Task.CostUSD, 1e-9)
	require.Equal(t, u.Task, u.Chain)

	// The retry belongs to the same chain: its usage adds to the chain's.
	retry, err := b.admin.RetryTask(b.ctx, task.ID, "")
	require.NoError(t, err)
	got, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Equal(t, retry.ID, got.ID)
	res, err := w.FinishMany(b.ctx, []client.Finish{{ID: retry.ID, Status: events.StatusCompleted,
		Usage: &events.UsageReport{Model: "claude-opus-4-5", OutputTokens: 1_000_000}}}) // 25 USD
	require.NoError(t, err)
	require.True(t, res[0].Success, "%+v", res[0])
	u, err = b.admin.TaskLLMUsage(b.ctx, retry.ID)
	require.NoError(t, err)
	require.Equal(t, task.ID, u.RootTaskID)
	require.InDelta(t, 25, u.Task.CostUSD, 1e-9)
	require.InDelta(t, 43.25, u.Chain.CostUSD, 1e-9)
	require.Equal(t, int64(4), u.Chain.Reports)

	today, err := b.admin.LLMUsageToday(b.ctx)
	require.NoError(t, err)
	require.Len(t, today, 1)
	require.Equal(t, tt.ID, today[0].TaskTypeID)
	require.Equal(t, u.Chain, today[0].Usage, "every report of the type today")
	wu, err := b.db.WorkerUsageToday(b.ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, u.Chain, wu.Usage)

	// Each report is an event of the task's history, with a summary.
	evs, err := b.admin.TaskEvents(b.ctx, task.ID)
	require.NoError(t, err)
	var summaries []string
	for _, e := range evs {
		if e.Type == "task.usage_reported" {
			summaries = append(summaries, e.Summary)
		}
	}
	require.Len(t, summaries, 3)
	require.Contains(t, summaries[0], "LLM usage by Genesis: claude-sonnet-4-5-20250929, 2000000 tokens")
	require.Contains(t, summaries[2], "(model not in the price table)")
}

// Bad usage gets a 400 naming the field, a task the worker does not hold a
// 403, a finished task a 409; none changes anything.
func TestLLMUsageRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "research")
	w := b.newWorker(t, "Genesis", 2)
	other := b.newWorker(t, "Exodus", 2)
	task := b.newTask(t, tt, "NVDA", events.PriorityHigh, "")
	_, err := w.Claim(b.ctx)
	require.NoError(t, err)
	before, err := b.admin.Task(b.ctx, task.ID)
	require.NoError(t, err)

	path := "/api/v1/worker/tasks/" + task.ID + "/usage"
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"negative tokens", map[string]any{"model": "claude-sonnet-4-5", "input_tokens": -1}, "input_tokens"},
		{"absurd tokens", map[string]any{"model": "claude-sonnet-4-5", "cache_read_tokens": int64(events.MaxUsageTokens) + 1}, "cache_read_tokens"},
		{"negative cost", map[string]any{"model": "claude-sonnet-4-5", "cost_usd": -0.5}, "cost_usd"},
		{"absurd cost", map[string]any{"model": "claude-sonnet-4-5", "cost_usd": 1e9}, "cost_usd"},
		{"no model", map[string]any{"input_tokens": 5}, "model"},
		{"model too long", map[string]any{"model": strings.Repeat("m", events.MaxModelNameLen+1)}, "model"},
		{"unknown field", map[string]any{"model": "claude-sonnet-4-5", "tokens": 5}, "tokens"},
		{"tokens not a number", map[string]any{"model": "claude-sonnet-4-5", "output_tokens": "many"}, "output_tokens"},
	} {
		err := w.Do(b.ctx, http.MethodPost, path, c.body, nil)
		requireAPIError(t, err, http.StatusBadRequest, "validation_failed", c.field)
	}
	err = w.Do(b.ctx, http.MethodPut, "/api/v1/worker/tasks/"+task.ID+"/status",
		map[string]any{"status": "completed", "usage": map[string]any{"model": "x", "output_tokens": -5}}, nil)
	requireAPIError(t, err, http.StatusBadRequest, "validation_failed", "usage.output_tokens")
	_, err = w.FinishMany(b.ctx, []client.Finish{{ID: task.ID, Status: events.StatusCompleted,
		Usage: &events.UsageReport{Model: "x", InputTokens: -1}}})
	requireAPIError(t, err, http.StatusBadRequest, "validation_failed", "[0].usage.input_tokens")

	_, err = other.ReportUsage(b.ctx, task.ID, events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 5})
	requireAPIError(t, err, http.StatusForbidden, "forbidden", "")

	after, err := b.admin.Task(b.ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, before.Version, after.Version, "nothing changed")
	require.Equal(t, events.StatusInProgress, after.Status)
	u, err := b.admin.TaskLLMUsage(b.ctx, task.ID)
	require.NoError(t, err)
	require.Zero(t, u.Task.Reports)

	_, err = w.Complete(b.ctx, task.ID)
	require.NoError(t, err)
	_, err = w.ReportUsage(b.ctx, task.ID, events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 5})
	requireAPIError(t, err, http.StatusConflict, "invalid_transition", "")
}

// A type's daily budgets are part of its definition: set, shown, changed
// and removed with it; bad ones are a 400 naming the field, nothing made.
func TestTaskTypeBudgets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path := "/api/v1/admin/workers/task-types"
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"name": "crawl", "daily_token_budget": 0}, "daily_token_budget"},
		{map[string]any{"name": "crawl", "daily_token_budget": -5}, "daily_token_budget"},
		{map[string]any{"name": "crawl", "daily_cost_budget_usd": 0.001}, "daily_cost_budget_usd"},
		{map[string]any{"name": "crawl", "daily_cost_budget_usd": 2e6}, "daily_cost_budget_usd"},
		{map[string]any{"name": "crawl", "daily_cost_budget_usd": "lots"}, "daily_cost_budget_usd"},
	} {
		err := b.admin.Do(b.ctx, http.MethodPost, path, c.body, nil)
		requireAPIError(t, err, http.StatusBadRequest, "validation_failed", c.field)
	}
	types, err := b.admin.TaskTypes(b.ctx, true)
	require.NoError(t, err)
	require.Empty(t, types, "nothing was created")

	tokens, usd := int64(5_000_000), 25.5
	tt, err := b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: "crawl", DailyTokenBudget: &tokens, DailyCostBudgetUSD: &usd})
	require.NoError(t, err)
	require.Equal(t, tokens, *tt.DailyTokenBudget)
	require.Equal(t, usd, *tt.DailyCostBudgetUSD)
	got, err := b.admin.TaskType(b.ctx, tt.ID)
	require.NoError(t, err)
	require.Equal(t, usd, *got.DailyCostBudgetUSD, "read back from the projection")
	today, err := b.admin.LLMUsageToday(b.ctx)
	require.NoError(t, err)
	require.Equal(t, tokens, *today[0].DailyTokenBudget)
	require.Equal(t, usd, *today[0].DailyCostBudgetUSD)

	got, err = b.admin.UpdateTaskType(b.ctx, tt.ID, client.NewTaskType{Name: "crawl"})
	require.NoError(t, err)
	require.Nil(t, got.DailyTokenBudget, "an update without budgets removes them")
	require.Nil(t, got.DailyCostBudgetUSD)
}
