package replay_test

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/replay/replaytest"
	"github.com/clawdbot/task-service/store/storetest"
)

// A synthetic log rebuilds into projections that verify clean, and a second
// rebuild over live tables gives the same rows.
func TestSyntheticLogRebuildsAndVerifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	n, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: 20_000, Seed: 1, Active: 300})
	require.NoError(t, err)

	rep, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.EqualValues(t, n, rep.Events)
	require.Positive(t, rep.Rows["worker_tasks"])
	require.Positive(t, rep.Rows["worker_task_updates"])
	require.Positive(t, rep.Rows["task_assignments"])

	v, err := replay.Verify(ctx, pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, v.Clean(), "differences: %+v", v.Differences)
	require.EqualValues(t, n, v.Events)
	for name, td := range v.Tables {
		require.Equal(t, rep.Rows[name], td.Rows, name)
	}
	var tasks int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks`).Scan(&tasks))
	require.Equal(t, rep.Rows["worker_tasks"], tasks)

	again, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.Equal(t, rep.Rows, again.Rows)
}

// The heap order of the log does not matter: with every row stored in
// reverse, each stream arrives newest first and is put back in order.
func TestReplayFoldsALogStoredOutOfOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	_, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: 5_000, Seed: 7, Active: 50})
	require.NoError(t, err)
	first, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `CREATE TABLE reversed AS SELECT * FROM task_events ORDER BY seq DESC;
		TRUNCATE task_events;
		INSERT INTO task_events OVERRIDING SYSTEM VALUE SELECT * FROM reversed;
		DROP TABLE reversed`)
	require.NoError(t, err)
	var firstSeq, last int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT seq FROM task_events LIMIT 1`).Scan(&firstSeq))
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(seq) FROM task_events`).Scan(&last))
	require.Equal(t, last, firstSeq, "the heap now starts with the newest event")

	v, err := replay.Verify(ctx, pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, v.Clean(), "differences: %+v", v.Differences)
	again, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.Equal(t, first.Rows, again.Rows)
}

// TestReplayThroughput measures Verify and Rebuild on a large synthetic
// log. It runs only when REPLAY_BENCH_EVENTS is set (e.g. 1000000):
//
//	REPLAY_BENCH_EVENTS=1000000 go test ./store/replay -run TestReplayThroughput -v -timeout 30m
func TestReplayThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REPLAY_BENCH_EVENTS"))
	if n <= 0 {
		t.Skip("set REPLAY_BENCH_EVENTS to run")
	}
	// As taskctl replay does: the fold is a large, long-lived heap.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	ctx := context.Background()
	var pool *pgxpool.Pool
	if url := os.Getenv("REPLAY_BENCH_URL"); url != "" {
		// A migrated database to keep between runs: seeded when empty.
		var err error
		pool, err = pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
	} else {
		pool = storetest.NewPool(t)
	}
	var have int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events`).Scan(&have))
	if have == 0 {
		start := time.Now()
		written, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: n, Seed: 42})
		require.NoError(t, err)
		t.Logf("seeded %d events in %s", written, time.Since(start).Round(time.Millisecond))
		_, err = pool.Exec(ctx, `VACUUM ANALYZE task_events`)
		require.NoError(t, err)
	}

	first, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	t.Logf("rebuild onto empty tables: %d events in %s = %.0f events/s; rows %v",
		first.Events, first.Elapsed.Round(time.Millisecond), float64(first.Events)/first.Elapsed.Seconds(), first.Rows)

	for range 2 {
		phases := map[string]time.Duration{}
		v, err := replay.Verify(ctx, pool, replay.VerifyConfig{Progress: func(p replay.Progress) { phases[p.Phase] = p.Elapsed }})
		require.NoError(t, err)
		require.True(t, v.Clean(), "differences: %+v", v.Differences)
		t.Logf("verify: %d events in %s = %.0f events/s (phases %v)",
			v.Events, v.Elapsed.Round(time.Millisecond), float64(v.Events)/v.Elapsed.Seconds(), phases)

		phases = map[string]time.Duration{}
		r, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{Progress: func(p replay.Progress) { phases[p.Phase] = p.Elapsed }})
		require.NoError(t, err)
		t.Logf("rebuild: %d events in %s = %.0f events/s, lock held %s (phases %v)",
			r.Events, r.Elapsed.Round(time.Millisecond), float64(r.Events)/r.Elapsed.Seconds(), r.LockHeld, phases)
	}
}
