package replay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// The LLM usage totals equal the sums of the usage events; a tampered
// counter, a lost row and a bogus row are each reported, and a rebuild
// repairs them.
func TestUsageTotalsVerifiedAndRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 6)
	w.runConcurrently(ctx, t, 4, 400, 7)
	require.Positive(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = 'task.usage_reported'`))
	require.Positive(t, count(t, pool, `SELECT count(*) FROM llm_usage_tasks WHERE unpriced_reports > 0`), "an unknown model")
	require.Equal(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = 'task.usage_reported'`),
		count(t, pool, `SELECT sum(reports) FROM llm_usage_type_days`))
	rep := verify(t, pool)
	requireClean(t, rep)
	for _, table := range []string{"llm_usage_tasks", "llm_usage_chains", "llm_usage_type_days", "llm_usage_worker_days"} {
		require.Positive(t, rep.Tables[table].Rows, table)
	}

	for _, sql := range []string{
		`UPDATE llm_usage_chains SET cost_micro_usd = cost_micro_usd + 1 WHERE root_task_id = (SELECT root_task_id FROM llm_usage_chains LIMIT 1)`,
		`DELETE FROM llm_usage_type_days WHERE (task_type_id, day) = (SELECT task_type_id, day FROM llm_usage_type_days LIMIT 1)`,
		`INSERT INTO llm_usage_worker_days (worker_id, day, reports) VALUES (gen_random_uuid(), '2001-02-03', 1)`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	rep = verify(t, pool)
	require.False(t, rep.Clean())
	sides := map[string]replay.Side{}
	for _, d := range rep.Differences {
		sides[d.Table] = d.Side
	}
	require.Equal(t, map[string]replay.Side{"llm_usage_chains": replay.Changed, "llm_usage_type_days": replay.EventsOnly,
		"llm_usage_worker_days": replay.LiveOnly}, sides, "%+v", rep.Differences)

	_, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))
	w.runConcurrently(ctx, t, 2, 200, 8) // the write path adds to the swapped tables
	requireClean(t, verify(t, pool))
}
