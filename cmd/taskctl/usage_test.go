package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// taskctl usage lists today's usage per type; with a task, the task's and
// its chain's.
func TestUsageCommand(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	ctx := context.Background()
	db, err := store.New(e.pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	e.ok("types", "create", "--name", "crawl")
	tt, err := db.ListTaskTypes(ctx, false)
	require.NoError(t, err)
	w, err := db.CreateUser(ctx, events.UserRegistered{Email: "agent@example.com", FullName: "Agent", IsWorker: true, MaxConcurrentTasks: 1},
		"agent-password", "not-a-hash", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	task, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt[0].ID,
		NewTaskParams: events.NewTaskParams{Title: "NVDA"}}, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
	_, err = db.Claim(ctx, w.ID, meta)
	require.NoError(t, err)
	_, _, err = db.ReportUsage(ctx, task.ID, w.ID, events.UsageReport{Model: "claude-haiku-4-5", InputTokens: 1_000_000, OutputTokens: 200_000}, meta)
	require.NoError(t, err)

	out := e.ok("usage")
	require.Regexp(t, `crawl\s+\d{4}-\d\d-\d\d\s+1200000\s+-\s+2\.0000\s+-\s+1\s+0\s+running`, out)
	out = e.ok("usage", task.ID)
	require.Regexp(t, `task `+task.ID+`\s+1\s+1200000\s+1000000\s+200000\s+0\s+0\s+2\.0000`, out)
	require.Regexp(t, `chain `+task.ID+`\s+1\s+1200000`, out)
	code, _, errOut := e.taskctl("usage", task.ID, "extra")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unexpected argument "extra"`)

	// Budgets: set, shown, kept by other edits, removed; a bad one refused.
	e.ok("types", "budget", "crawl", "--daily-tokens", "5000000", "--daily-usd", "2.5")
	out = e.ok("types", "show", "crawl")
	require.Regexp(t, `Daily token budget\s+5000000`, out)
	require.Regexp(t, `Daily cost budget\s+2.50 USD`, out)
	require.Regexp(t, `crawl\s+\S+\s+1200000\s+5000000\s+2\.0000\s+2\.50\s+1\s+0\s+running`, e.ok("usage"))
	e.ok("types", "limit", "crawl", "--max-in-progress", "3")
	require.Regexp(t, `Daily token budget\s+5000000`, e.ok("types", "show", "crawl"), "a limit keeps the budgets")
	code, _, errOut = e.taskctl("types", "budget", "crawl", "--daily-tokens", "-3")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "daily_token_budget")
	code, _, errOut = e.taskctl("types", "budget", "crawl")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give --daily-tokens")
	e.ok("types", "budget", "crawl", "--none")
	require.NotContains(t, e.ok("types", "show", "crawl"), "Daily token budget")
}
