package reactors_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
)

// A token budget pauses its type when the day's usage reaches it; a person
// who resumes it the same day sees it paused again by the next report; a
// budget lowered below the day's usage pauses at once; the day's turn
// resumes the budget's pauses and never a person's.
func TestBudgetsPauseAndTheDayResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runner("a", reactors.NewBudgetReactor(e.db, e.log))
	thousand := int64(1000)
	tt := e.taskType(events.TaskTypeSpec{Name: "crawl", MaxRetries: 1, TypeBudgets: events.TypeBudgets{DailyTokenBudget: &thousand}})
	other := e.taskType(events.TaskTypeSpec{Name: "summarize"})
	held := e.taskType(events.TaskTypeSpec{Name: "held"})
	admin := events.Meta{Actor: events.System("test-admin")}
	_, err := e.db.UpdateTaskType(e.ctx, held.ID, admin, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Pause("ops", "vendor down") })
	require.NoError(t, err)
	w := e.worker("Agent", 3)
	wm := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}}
	report := func(typ *events.TaskType, tokens int64) {
		t.Helper()
		task := e.createAssigned(typ, "work", "", w)
		require.NotNil(t, e.claim(w))
		_, _, err := e.db.ReportUsage(e.ctx, task.ID, w, events.UsageReport{Model: "claude-haiku-4-5", InputTokens: tokens}, wm)
		require.NoError(t, err)
		_, _, err = e.db.CompleteTask(e.ctx, task.ID, w, wm)
		require.NoError(t, err)
	}
	typeOf := func(id string) *events.TaskType {
		got, err := e.db.GetTaskType(e.ctx, e.pool, id)
		require.NoError(t, err)
		return got
	}
	day := e.db.Day().Of(e.db.Now())

	report(tt, 600)
	time.Sleep(300 * time.Millisecond)
	require.False(t, typeOf(tt.ID).Paused, "600 of 1000")
	report(tt, 500)
	e.eventually("the budget's pause", func() bool { return typeOf(tt.ID).Paused })
	got := typeOf(tt.ID)
	require.True(t, got.PausedByBudget())
	require.Equal(t, "daily token budget spent, 1100 of 1000 tokens on "+day+"; resumes when the day turns (00:00 UTC)", got.PauseReason)

	_, err = e.db.UpdateTaskType(e.ctx, tt.ID, admin, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Resume("ops", "one more") })
	require.NoError(t, err)
	report(tt, 1)
	e.eventually("the budget's pause again", func() bool { return typeOf(tt.ID).PausedByBudget() })

	report(other, 500)
	hundred := int64(100)
	spec := other.TaskTypeSpec
	spec.DailyTokenBudget = &hundred
	_, err = e.db.UpdateTaskType(e.ctx, other.ID, admin, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Update(spec) })
	require.NoError(t, err)
	e.eventually("a lowered budget's pause", func() bool { return typeOf(other.ID).PausedByBudget() })

	days, err := reactors.NewBudgetDays(reactors.BudgetDaysConfig{DB: e.db, Logger: e.log})
	require.NoError(t, err)
	n, err := days.ResumeOverdue(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the same day: nothing resumes")
	e.clock.Advance(24 * time.Hour)
	n, err = days.ResumeOverdue(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.False(t, typeOf(tt.ID).Paused)
	require.False(t, typeOf(other.ID).Paused)
	require.True(t, typeOf(held.ID).Paused, "a person's pause stays")
	resumed := ofType(e.stream(tt.ID), "task_type.resumed")
	require.Equal(t, events.System(events.BudgetPauser), resumed[len(resumed)-1].Meta.Actor)
	n, err = days.ResumeOverdue(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "once")
}
