package main_test

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/store/storetest"
)

// The binary pauses a schedule whose executions keep failing: with
// max_failures 1, one execution whose task fails with no retries left is
// enough. The reactor that decides it must be wired into the binary, not
// only into its own tests.
func TestScheduleWithFailingExecutionsPausesItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL, "REACTOR_CATCH_UP=1s")
	hc := checkedHTTP(t, s.base, nil)
	admin := client.New(s.base, hc)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	noRetries := 0
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "report", Label: "Report", MaxRetries: &noRetries})
	require.NoError(t, err)
	_, err = admin.CreateWorker(ctx, client.NewWorker{Email: "w@workers.example.com", Password: "worker-password",
		FullName: "W", MaxConcurrentTasks: 1})
	require.NoError(t, err)
	worker := client.New(s.base, hc)
	_, err = worker.Login(ctx, "w@workers.example.com", "worker-password")
	require.NoError(t, err)

	// Hourly from tomorrow: only the run by hand below makes an execution.
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour).UTC()
	one := 1
	sc, err := admin.CreateSchedule(ctx, client.NewSchedule{Name: "nightly report",
		Task:     events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "Nightly report"},
		Interval: &events.Interval{Every: 1, Unit: events.UnitHours}, StartAt: &start, MaxFailures: &one})
	require.NoError(t, err)
	run, err := admin.RunSchedule(ctx, sc.ID)
	require.NoError(t, err)
	claimed, err := worker.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, run.Task.ID, claimed.ID)
	_, err = worker.Fail(ctx, claimed.ID, "the report service answered 500")
	require.NoError(t, err)

	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := admin.Schedule(ctx, sc.ID)
		require.NoError(t, err)
		if got.State == events.ScheduleStatePaused {
			require.True(t, got.AutoPaused)
			require.Contains(t, got.PausedReason, "the report service answered 500")
			break
		}
		require.True(t, time.Now().Before(deadline), "the schedule is still %s a minute after its execution failed for good", got.State)
		time.Sleep(50 * time.Millisecond)
	}

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var checkpoints int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM reactor_checkpoints WHERE name = 'schedule_failures' AND seq > 0`).Scan(&checkpoints))
	require.Equal(t, 1, checkpoints, "the schedule_failures reactor keeps its checkpoint")
}

// An existing deployment gets the reactor's checkpoint where the retry
// reactor is (the migration that wires it in): the failures decided before
// are history.
func TestScheduleFailuresStartsWhereRetryIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, storetest.NewDB(t))
	require.NoError(t, err)
	defer pool.Close()
	names, err := fs.Glob(migrations.FS, "*_schedule_failures_checkpoint.up.sql")
	require.NoError(t, err)
	require.Len(t, names, 1)
	seed, err := fs.ReadFile(migrations.FS, names[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM reactor_checkpoints WHERE name = 'schedule_failures';
		INSERT INTO reactor_checkpoints (name, tx_id, seq) VALUES ('retry', '812', 4096)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, string(seed))
	require.NoError(t, err)
	var txID string
	var seq int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT tx_id::text, seq FROM reactor_checkpoints WHERE name = 'schedule_failures'`).Scan(&txID, &seq))
	require.Equal(t, "812", txID)
	require.EqualValues(t, 4096, seq)
}
