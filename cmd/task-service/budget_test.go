package main_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// claudeCodeUsage reads task-worker's fixture of Claude Code's
// `--output-format json` result as task-worker reports it: every model's
// tokens, the costliest model's name, the session's total cost.
func claudeCodeUsage(t *testing.T) events.UsageReport {
	t.Helper()
	raw, err := os.ReadFile("../task-worker/testdata/claude-code-result.json")
	require.NoError(t, err)
	var r struct {
		TotalCostUSD float64 `json:"total_cost_usd"`
		ModelUsage   map[string]struct {
			InputTokens, OutputTokens, CacheReadInputTokens, CacheCreationInputTokens int64
			CostUSD                                                                   float64
		} `json:"modelUsage"`
	}
	require.NoError(t, json.Unmarshal(raw, &r))
	u := events.UsageReport{CostUSD: &r.TotalCostUSD}
	top := -1.0
	for model, m := range r.ModelUsage {
		u.InputTokens += m.InputTokens
		u.OutputTokens += m.OutputTokens
		u.CacheReadTokens += m.CacheReadInputTokens
		u.CacheWriteTokens += m.CacheCreationInputTokens
		if m.CostUSD > top {
			u.Model, top = model, m.CostUSD
		}
	}
	return u
}

// Usage from Claude Code's JSON result pushes a type over its daily cost
// budget on a cluster of three: the type is paused by the budget once,
// Telegram hears it once with the figures, claims skip its tasks, and at
// the team day's turn (DAY_STARTS_AT, a few seconds ahead) it resumes by
// itself, once; a type a person paused stays paused.
func TestInstancesBudgetPausesOnceAndResumesAtTheDayTurn(t *testing.T) {
	t.Parallel()
	bot := newBotFake(t, func(int) (int, string) { return 0, "" })
	turn := time.Now().UTC().Add(45 * time.Second).Truncate(time.Second)
	c := newCluster(t, 3, "TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_CHAT_ID=-100777",
		"TELEGRAM_API_BASE="+bot.srv.URL, "TELEGRAM_WINDOW=200ms", "TELEGRAM_LEASE=31s",
		"DIGEST_TZ=UTC", "DAY_STARTS_AT="+turn.Format("15:04:05"), "BUDGET_CHECK_INTERVAL=200ms",
		"METRICS_SAMPLE_INTERVAL=200ms")
	ctx := c.ctx
	// Messages name the turn as the team day prints it: seconds only when not zero.
	turnsAt := strings.TrimSuffix(events.TeamDay{Start: turn.Sub(turn.Truncate(24 * time.Hour))}.String(), " UTC")
	budget := 0.5
	tt, err := c.admin.CreateTaskType(ctx, client.NewTaskType{Name: "research", DailyCostBudgetUSD: &budget})
	require.NoError(t, err)
	require.Equal(t, budget, *tt.DailyCostBudgetUSD)
	held, err := c.admin.CreateTaskType(ctx, client.NewTaskType{Name: "held"})
	require.NoError(t, err)
	_, err = c.admin.PauseTaskType(ctx, held.ID, "waiting for the vendor")
	require.NoError(t, err)
	w := c.worker("agent", 1)
	usage := claudeCodeUsage(t)
	day := turn.Add(-24 * time.Hour).Format(time.DateOnly)
	if time.Now().UTC().After(turn) {
		t.Fatal("the cluster took longer to start than the day's turn is ahead")
	}

	var ids []string
	for i := range 3 {
		task, err := c.admin.CreateTask(ctx, client.NewTask{Title: fmt.Sprintf("NVDA %d", i), TaskTypeID: tt.ID})
		require.NoError(t, err)
		ids = append(ids, task.ID)
	}
	for i := range 2 { // each session costs 0.41 USD: the second reaches the 0.50 budget
		got, err := w.clients[i].Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, got)
		_, err = w.clients[i].FinishWithUsage(ctx, got.ID, events.StatusCompleted, "", usage)
		require.NoError(t, err)
	}
	c.eventually("the budget to pause the type", func() bool {
		got, err := c.admin.TaskType(ctx, tt.ID)
		require.NoError(t, err)
		return got.Paused
	})
	require.False(t, time.Now().UTC().After(turn), "paused before the day turned")
	paused, err := c.admin.TaskType(ctx, tt.ID)
	require.NoError(t, err)
	require.Equal(t, events.BudgetPauser, paused.PausedBy)
	wantReason := fmt.Sprintf("daily cost budget spent, 0.83 of 0.50 USD on %s; resumes when the day turns (%s UTC)",
		day, turnsAt)
	require.Equal(t, wantReason, paused.PauseReason)
	got, err := w.clients[2].Claim(ctx)
	require.NoError(t, err)
	require.Nil(t, got, "claims skip a paused type's tasks")

	alert := "⏸️ Task type research paused by budget: " + wantReason + ". Its tasks wait until it is resumed."
	c.eventually("the alert", func() bool { return bot.snapshot()[alert] == 1 })
	// Another instance's gauge follows its own budget check: it may be a
	// check behind the alert.
	var samples []sample
	c.eventually("instance 1's cost gauge", func() bool {
		_, samples = scrape(t, c.ins[1].base)
		return math.Abs(sum(samples, "taskservice_llm_cost_usd_today", map[string]string{"task_type": "research"})-0.825478) < 1e-6
	})
	require.EqualValues(t, 0.5, sum(samples, "taskservice_llm_daily_budget", map[string]string{"task_type": "research", "unit": "usd"}))

	// The day turns: the budget's pause ends, once; the person's does not.
	time.Sleep(time.Until(turn))
	c.eventually("the day's turn to resume the type", func() bool {
		got, err := c.admin.TaskType(ctx, tt.ID)
		require.NoError(t, err)
		return !got.Paused
	})
	resumed := fmt.Sprintf("▶️ Task type research resumed by budget: a new day, %s (%s UTC)", turn.Format(time.DateOnly), turnsAt)
	c.eventually("the resume's message", func() bool { return bot.snapshot()[resumed] == 1 })
	got, err = w.clients[2].Claim(ctx)
	require.NoError(t, err)
	require.NotNil(t, got, "its tasks are claimed again")
	require.Equal(t, ids[2], got.ID)
	time.Sleep(time.Second) // three instances had time to do it again
	require.Equal(t, 1, c.count(`SELECT count(*) FROM task_events WHERE stream_id = $1 AND type = 'task_type.paused'`, tt.ID))
	require.Equal(t, 1, c.count(`SELECT count(*) FROM task_events WHERE stream_id = $1 AND type = 'task_type.resumed'
		AND meta->'actor'->>'kind' = 'system' AND meta->'actor'->>'id' = 'budget'`, tt.ID))
	lines := bot.snapshot()
	require.Equal(t, 1, lines[alert], "the alert is sent once")
	require.Equal(t, 1, lines[resumed])
	h, err := c.admin.TaskType(ctx, held.ID)
	require.NoError(t, err)
	require.True(t, h.Paused, "a person's pause is never resumed by the day's turn")
	for line := range lines {
		require.False(t, strings.Contains(line, "held resumed"), "the held type was not resumed: %s", line)
	}
}
