package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// The running service prunes a schedule's history to SCHEDULE_HISTORY_RUNS
// while its stats, counters kept as executions end, still count every run.
func TestServicePrunesScheduleHistoryAndKeepsStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL, "REACTOR_CATCH_UP=1s", "SCHEDULE_HISTORY_RUNS=2", "SCHEDULE_HISTORY_PRUNE_INTERVAL=1s")
	hc := checkedHTTP(t, s.base, nil)
	admin := client.New(s.base, hc)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	noRetries, never := 0, 0
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "report", Label: "Report", MaxRetries: &noRetries})
	require.NoError(t, err)
	_, err = admin.CreateWorker(ctx, client.NewWorker{Email: "w@workers.example.com", Password: "worker-password",
		FullName: "W", MaxConcurrentTasks: 1})
	require.NoError(t, err)
	worker := client.New(s.base, hc)
	_, err = worker.Login(ctx, "w@workers.example.com", "worker-password")
	require.NoError(t, err)

	// Hourly from tomorrow: only the runs by hand make executions.
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour).UTC()
	sc, err := admin.CreateSchedule(ctx, client.NewSchedule{Name: "nightly report",
		Task:     events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "Nightly report"},
		Interval: &events.Interval{Every: 1, Unit: events.UnitHours}, StartAt: &start, MaxFailures: &never})
	require.NoError(t, err)
	for i := range 5 {
		run, err := admin.RunSchedule(ctx, sc.ID)
		require.NoError(t, err)
		claimed, err := worker.Claim(ctx)
		require.NoError(t, err)
		require.Equal(t, run.Task.ID, claimed.ID)
		if i == 3 {
			_, err = worker.Fail(ctx, claimed.ID, "the report service answered 500")
		} else {
			_, err = worker.Complete(ctx, claimed.ID)
		}
		require.NoError(t, err)
	}

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := admin.ScheduleExecutions(ctx, sc.ID, 0, 50)
		require.NoError(t, err)
		st, err := admin.ScheduleStats(ctx, sc.ID)
		require.NoError(t, err)
		var firings int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM schedule_firings WHERE schedule_id = $1`, sc.ID).Scan(&firings))
		if len(page.Executions) == 2 && firings == 2 && st.Failed == 1 {
			require.Equal(t, []int{5, 4}, []int{page.Executions[0].Run, page.Executions[1].Run})
			require.Equal(t, 5, st.Runs)
			require.Equal(t, 4, st.Completed)
			require.Equal(t, 0, st.Unfinished)
			require.Equal(t, 4, st.LastFailure.Run)
			require.InDelta(t, 0.8, *st.SuccessRate, 1e-9)
			break
		}
		require.True(t, time.Now().Before(deadline), "not pruned to the last 2 runs with stats intact: %d executions listed, %d firing rows, stats %+v",
			len(page.Executions), firings, st)
		time.Sleep(100 * time.Millisecond)
	}
	var evs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1 AND type = 'schedule.fired'`, sc.ID).Scan(&evs))
	require.Equal(t, 5, evs, "the log keeps every firing")
}
