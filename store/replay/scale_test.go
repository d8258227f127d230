package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/replay/replaytest"
	"github.com/clawdbot/task-service/store/storetest"
)

// A lock held on the log for 2 s when the swap comes, as autovacuum holds
// one (SHARE UPDATE EXCLUSIVE), does not throw the rebuild away: the swap
// waits longer at each attempt, past deadlock_timeout (after which
// PostgreSQL would cancel a real autovacuum), and completes. Three
// attempts of a fixed 500 ms, as before ADR 010, gave up.
func TestRebuildWaitsOutAnAutovacuumStyleLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	_, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: 3_000, Seed: 3, Active: 50})
	require.NoError(t, err)

	// The lock is taken when the rebuild reaches its swap, and held 2 s.
	var locked time.Time
	released := make(chan error, 1)
	lockAtSwap := func(p replay.Progress) {
		if p.Phase != "swap" || p.Done != 0 {
			return
		}
		holder, err := pool.Begin(ctx)
		if err == nil {
			_, err = holder.Exec(ctx, `LOCK TABLE task_events IN SHARE UPDATE EXCLUSIVE MODE`)
		}
		if err != nil {
			released <- err
			return
		}
		locked = time.Now()
		go func() {
			time.Sleep(2 * time.Second)
			released <- holder.Commit(ctx)
		}()
	}
	rep, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{Progress: lockAtSwap, LockTimeout: 500 * time.Millisecond, LockAttempts: 3})
	require.NoError(t, err)
	swapped := time.Now()
	require.NoError(t, <-released)
	require.False(t, locked.IsZero())
	require.Greater(t, swapped.Sub(locked), 2*time.Second, "the swap waited for the lock")
	require.Greater(t, rep.LockAttempts, 1)
	t.Logf("rebuild: %d events, swapped %s after the lock was taken, in %d attempts", rep.Events, swapped.Sub(locked), rep.LockAttempts)
	requireClean(t, verify(t, pool))
}

// Folded in ranges of a few hundred events, a log rebuilds and verifies
// exactly as in one piece, and a damaged counter is found.
func TestReplayInRangesOfStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	n, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: 6_000, Seed: 9, Active: 40})
	require.NoError(t, err)
	rb, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{PartitionEvents: 500})
	require.NoError(t, err)
	require.EqualValues(t, n, rb.Events)
	v, err := replay.Verify(ctx, pool, replay.VerifyConfig{PartitionEvents: 700})
	require.NoError(t, err)
	requireClean(t, v)
	for name, td := range v.Tables {
		require.Equal(t, rb.Rows[name], td.Rows, name)
	}
	whole, err := replay.Verify(ctx, pool, replay.VerifyConfig{PartitionEvents: 1_000_000})
	require.NoError(t, err)
	require.Equal(t, v.Tables, whole.Tables)

	// The counters are checked like any projection.
	_, err = pool.Exec(ctx, `UPDATE task_counts SET completed = completed + 1 WHERE pid = 0`)
	require.NoError(t, err)
	v, err = replay.Verify(ctx, pool, replay.VerifyConfig{PartitionEvents: 700})
	require.NoError(t, err)
	require.False(t, v.Clean())
	require.Len(t, v.Differences, 1)
	require.Equal(t, "task_counts", v.Differences[0].Table)
	require.Equal(t, []string{"completed"}, v.Differences[0].Changed)
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{PartitionEvents: 500})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))
}
