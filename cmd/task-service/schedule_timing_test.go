package main_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// Bad timing at the binary's HTTP edge: dates outside the years 1970 to 9999
// and "@every" under the one-minute floor are a 400 naming the field, on
// create and on edit, and change nothing. A schedule stored with a start_at
// in year 0026 before dates were checked fails alone: it is paused with the
// reason while a healthy schedule keeps firing.
func TestScheduleTimingAtTheEdge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL, "SCHEDULER_CATCH_UP=1s")
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "tick", Label: "Tick"})
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n))
		return n
	}

	year := func(y int) *time.Time {
		v := time.Date(y, 5, 1, 6, 0, 0, 0, time.UTC)
		return &v
	}
	hourly := &events.Interval{Every: 1, Unit: events.UnitHours}
	task := events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "Tick"}
	for _, c := range []struct {
		field string
		s     client.NewSchedule
	}{
		{"start_at", client.NewSchedule{Task: task, Interval: hourly, StartAt: year(26)}},
		{"start_at", client.NewSchedule{Task: task, StartAt: year(1)}},
		{"start_at", client.NewSchedule{Task: task, Cron: "0 6 * * *", StartAt: year(1700)}},
		{"end_at", client.NewSchedule{Task: task, Interval: hourly, EndAt: year(27)}},
		{"cron", client.NewSchedule{Task: task, Cron: "@every 1s"}},
		{"cron", client.NewSchedule{Task: task, Cron: "@every 0s"}},
		{"cron", client.NewSchedule{Task: task, Cron: "@every -5m"}},
	} {
		_, err := admin.CreateSchedule(ctx, c.s)
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr, "%+v", c.s)
		require.Equal(t, http.StatusBadRequest, apiErr.Status, "%v", err)
		require.Equal(t, c.field, apiErr.Field, "%v", err)
	}
	require.Zero(t, count(`SELECT count(*) FROM schedules`), "nothing stored")

	later := time.Now().Add(time.Hour).Truncate(time.Minute).UTC()
	typo, err := admin.CreateSchedule(ctx, client.NewSchedule{Name: "typo", Task: task,
		Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}, StartAt: &later})
	require.NoError(t, err)
	for field, value := range map[string]any{"start_at": "0026-05-01T06:00:00Z", "end_at": "0001-01-01T00:00:00Z", "cron": "@every 30s"} {
		_, err := admin.UpdateSchedule(ctx, typo.ID, map[string]any{field: value})
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr, field)
		require.Equal(t, http.StatusBadRequest, apiErr.Status, "%v", err)
		require.Equal(t, field, apiErr.Field, "%v", err)
	}
	require.Equal(t, 1, count(`SELECT count(*) FROM task_events WHERE stream_id = $1`, typo.ID), "the edits changed nothing")

	// Make it what a release before the checks stored for start_at 0026-05-01:
	// anchor and first slot there, in its event and in its row.
	const old = `"0026-05-01T06:00:00Z"`
	_, err = pool.Exec(ctx, `UPDATE task_events SET data = data || jsonb_build_object('start_at', $2::jsonb, 'anchor', $2::jsonb, 'next_due_at', $2::jsonb)
		WHERE stream_id = $1`, typo.ID, old)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE schedules SET spec = spec || jsonb_build_object('start_at', $2::jsonb),
		anchor = ($2::jsonb->>0)::timestamptz, next_due_at = ($2::jsonb->>0)::timestamptz WHERE id = $1`, typo.ID, old)
	require.NoError(t, err)

	tick, err := admin.CreateSchedule(ctx, client.NewSchedule{Name: "tick", Task: task,
		Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}, Overlap: events.OverlapAllow})
	require.NoError(t, err)
	deadline := time.Now().Add(60 * time.Second)
	for count(`SELECT count(*) FROM schedule_firings WHERE schedule_id = $1 AND kind = 'fired'`, tick.ID) == 0 {
		require.True(t, time.Now().Before(deadline), "the healthy schedule did not fire within a minute")
		time.Sleep(50 * time.Millisecond)
	}
	got, err := admin.Schedule(ctx, typo.ID)
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStatePaused, got.State)
	require.True(t, got.AutoPaused)
	require.Contains(t, got.PausedReason, "start_at: must be a date in the years 1970 to 9999")
	require.Equal(t, 1, count(`SELECT count(*) FROM schedule_firings WHERE schedule_id = $1 AND kind = 'failed'`, typo.ID))

	rep, err := replay.Verify(ctx, pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify: %+v", rep.Differences)
}
