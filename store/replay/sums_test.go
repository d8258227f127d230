package replay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// A worker's completions per day and the per-minute counts equal the sums
// of their events (the minutes summed over their server processes' rows); a
// tampered counter, a lost minute and a bogus process row are each
// reported, and a rebuild repairs them.
func TestWorkerDaysAndMinutesVerifiedAndRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 6)
	w.runConcurrently(ctx, t, 4, 400, 9)
	rep := verify(t, pool)
	requireClean(t, rep)
	for _, table := range []string{"worker_day_completions", "task_minutes"} {
		require.Positive(t, rep.Tables[table].Rows, table)
	}

	for _, sql := range []string{
		`UPDATE worker_day_completions SET completed = completed + 1 WHERE (worker_id, day) = (SELECT worker_id, day FROM worker_day_completions LIMIT 1)`,
		`DELETE FROM task_minutes WHERE minute = (SELECT min(minute) FROM task_minutes)`,
		`INSERT INTO task_minutes (minute, pid, failed) VALUES ('2001-02-03 04:05:00+00', 12345, 1)`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	rep = verify(t, pool)
	require.False(t, rep.Clean())
	sides := map[string][]replay.Side{}
	for _, d := range rep.Differences {
		sides[d.Table] = append(sides[d.Table], d.Side)
	}
	require.Equal(t, []replay.Side{replay.Changed}, sides["worker_day_completions"], "%+v", rep.Differences)
	require.ElementsMatch(t, []replay.Side{replay.EventsOnly, replay.LiveOnly}, sides["task_minutes"], "%+v", rep.Differences)

	_, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))
	w.runConcurrently(ctx, t, 2, 200, 10) // the write path adds to the swapped tables
	requireClean(t, verify(t, pool))
}
