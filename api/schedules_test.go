package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// The schedules API end to end on one server: create, list with filters,
// get, edit, the actions, executions paged, stats and metrics; every answer
// is checked against the OpenAPI document by the contract.
func TestSchedulesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "report")
	other := b.newType(t, "digest")
	start := time.Now().Add(time.Hour).Truncate(time.Minute).UTC()
	maxFailures := 0
	s, err := b.admin.CreateSchedule(ctx, client.NewSchedule{Name: "hourly report",
		Task:     events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "Report", Params: json.RawMessage(`{"days":1}`), Priority: events.PriorityHigh},
		Interval: &events.Interval{Every: 1, Unit: events.UnitHours}, StartAt: &start, Overlap: events.OverlapAllow, MaxFailures: &maxFailures})
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStateActive, s.State)
	require.Equal(t, start, *s.NextDueAt)
	require.Equal(t, "UTC", s.TimeZone)
	require.Zero(t, s.MaxFailures)
	berlin, err := b.admin.CreateSchedule(ctx, client.NewSchedule{
		Task: events.ScheduleTemplate{TaskTypeID: other.ID, Title: "Digest", Params: json.RawMessage(`{"days":7}`)},
		Cron: "0 6 * * 1-5", TimeZone: "Europe/Berlin"})
	require.NoError(t, err)
	require.Equal(t, "Digest", berlin.Name, "the name defaults to the title")
	require.Equal(t, events.DefaultMaxFailures, berlin.MaxFailures)
	require.Equal(t, 6, berlin.NextDueAt.In(mustZone(t, "Europe/Berlin")).Hour())

	list, err := b.admin.Schedules(ctx, client.ScheduleQuery{TaskTypeID: other.ID})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, berlin.ID, list[0].ID)
	list, err = b.admin.Schedules(ctx, client.ScheduleQuery{State: "active", Limit: 1})
	require.NoError(t, err)
	require.Len(t, list, 1)
	rest, err := b.admin.Schedules(ctx, client.ScheduleQuery{State: "active", After: list[0].ID})
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.NotEqual(t, list[0].ID, rest[0].ID)

	// An edit keeps what it does not name; a cron replaces the interval.
	edited, err := b.admin.UpdateSchedule(ctx, berlin.ID, map[string]any{"interval": map[string]any{"every": 2, "unit": "days"}, "task": map[string]any{"priority": "urgent"}})
	require.NoError(t, err)
	require.Empty(t, edited.Cron)
	require.Equal(t, 2, edited.Interval.Every)
	require.Equal(t, events.PriorityUrgent, edited.Task.Priority)
	require.Equal(t, "Digest", edited.Task.Title)
	require.JSONEq(t, `{"days":7}`, string(edited.Task.Params))

	// Fire the hourly one three times, run it once by hand.
	check := api.NewParamsCheck()
	for h := range 3 {
		b.clock.offset.Store(int64(time.Until(start.Add(time.Duration(h) * time.Hour))))
		fired, err := b.db.FireDue(ctx, 100, check)
		require.NoError(t, err)
		require.NotEmpty(t, fired)
	}
	run, err := b.admin.RunSchedule(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, 4, *run.Task.ScheduleRun)
	require.Equal(t, s.ID, *run.Task.ScheduleID)
	require.Equal(t, start.Add(3*time.Hour), *run.Schedule.NextDueAt, "run now keeps the regular times")

	// Executions, newest first, two per page.
	page, err := b.admin.ScheduleExecutions(ctx, s.ID, 0, 2)
	require.NoError(t, err)
	require.Len(t, page.Executions, 2)
	require.Equal(t, 4, page.Executions[0].Run)
	require.Equal(t, "pending", page.Executions[0].Outcome)
	require.NotNil(t, page.NextBefore)
	page, err = b.admin.ScheduleExecutions(ctx, s.ID, *page.NextBefore, 2)
	require.NoError(t, err)
	require.Equal(t, []int{2, 1}, []int{page.Executions[0].Run, page.Executions[1].Run})
	require.Nil(t, page.NextBefore)

	// A worker completes run 1 and fails run 2 (retries left: retrying).
	w := b.newWorker(t, "Wanda", 5)
	for range 4 {
		_, err := w.Claim(ctx)
		require.NoError(t, err)
	}
	_, err = w.Complete(ctx, page.Executions[1].TaskID)
	require.NoError(t, err)
	_, err = w.Fail(ctx, page.Executions[0].TaskID, "source down")
	require.NoError(t, err)
	page, err = b.admin.ScheduleExecutions(ctx, s.ID, 3, 10)
	require.NoError(t, err)
	require.Equal(t, "retrying", page.Executions[0].Outcome)
	require.Equal(t, "completed", page.Executions[1].Outcome)
	require.NotNil(t, page.Executions[1].DurationSeconds)
	st, err := b.admin.ScheduleStats(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, 4, st.Runs)
	require.Equal(t, 1, st.Completed)
	require.InDelta(t, 1.0, *st.SuccessRate, 1e-9)
	require.NotNil(t, st.AvgDurationSeconds)

	m, err := b.admin.ScheduleMetrics(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, m.Active)
	require.Equal(t, 4, m.Fired24h, "three hourly firings, and the digest once: its new interval counts from the edit")
	require.Equal(t, 1, m.Runs24h)
	require.NotNil(t, m.DelayP99Seconds)

	// The actions and the transition table's refusals.
	paused, err := b.admin.ScheduleAction(ctx, s.ID, "pause", "holiday")
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStatePaused, paused.State)
	require.Equal(t, "holiday", paused.PausedReason)
	_, err = b.admin.ScheduleAction(ctx, s.ID, "pause", "")
	require.True(t, client.IsStatus(err, http.StatusConflict), "%v", err)
	resumed, err := b.admin.ScheduleAction(ctx, s.ID, "resume", "")
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStateActive, resumed.State)
	require.True(t, resumed.NextDueAt.After(b.clock.Now()))
	cancelled, err := b.admin.ScheduleAction(ctx, s.ID, "cancel", "no longer needed")
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStateCancelled, cancelled.State)
	require.Nil(t, cancelled.NextDueAt)
	_, err = b.admin.RunSchedule(ctx, s.ID)
	require.True(t, client.IsStatus(err, http.StatusConflict), "%v", err)
	got, err := b.admin.Schedule(ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStateCancelled, got.State)
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}
