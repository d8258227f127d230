package main_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
)

// Freshness rules across three real instances: one rule watches 100 keys
// with a max age of 3 s (a test-only minimum age). Every key gets exactly
// one task per staleness period: one at once (never completed), none while
// it is open, the next only once its completion is older than the max age;
// a key whose task is not completed gets no other. Priorities follow the
// weights, and every task has its decision event saying why.
func TestFreshnessRulesAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers for about 20 s")
	}
	t.Parallel()
	c := newCluster(t, 3, "TASK_SERVICE_TEST_MIN_FRESHNESS_AGE=1s", "FRESHNESS_CATCH_UP=1s")
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "reddit_crawl", Label: "Reddit crawl",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}},"required":["ticker"]}`)})
	require.NoError(t, err)

	// Weights by quarter: 25 (urgent), 6 (high), 3 (medium), 1 (low).
	const n, maxAge = 100, 3 * time.Second
	weightOf := func(i int) int { return []int{25, 6, 3, 1}[i/25] }
	prioOf := func(i int) events.Priority {
		return []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}[i/25]
	}
	keys := make([]events.FreshnessKey, n)
	for i := range keys {
		keys[i] = events.FreshnessKey{Key: fmt.Sprintf("T%03d", i), Weight: weightOf(i)}
	}
	rule, err := c.admin.CreateFreshnessRule(c.ctx, client.NewFreshnessRule{Name: "watchlist", TaskTypeID: tt.ID,
		TitleTemplate: "Reddit crawl for {{key}}", ParamsTemplate: `{"ticker": "{{key}}"}`, MaxAge: "3s", Keys: keys})
	require.NoError(t, err)

	tasksOf := func() map[string][]taskRow { return freshTasks(t, c, rule.ID) }
	c.eventually("a task for every key", func() bool { return c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1`, tt.ID) >= n })
	first := tasksOf()
	require.Len(t, first, n)
	for i, k := range keys {
		require.Len(t, first[k.Key], 1, k.Key)
		require.Equal(t, prioOf(i), first[k.Key][0].priority, k.Key)
		require.JSONEq(t, fmt.Sprintf(`{"ticker":%q}`, k.Key), first[k.Key][0].params)
	}

	// Complete every task; each key gets its next task only once its
	// completion is older than the max age.
	w := c.worker("genesis", n)
	finishAll := func(want int) []string {
		var done []string
		for len(done) < want {
			var claimed []*client.Finish
			require.NoError(t, w.do(len(done)%3, func(cl *client.Client) error {
				got, err := cl.ClaimMany(c.ctx, want-len(done), 0)
				for _, g := range got {
					claimed = append(claimed, &client.Finish{ID: g.ID, Status: events.StatusCompleted})
				}
				return err
			}))
			items := make([]client.Finish, len(claimed))
			for i, f := range claimed {
				items[i] = *f
				done = append(done, f.ID)
			}
			if len(items) > 0 {
				require.NoError(t, w.do(0, func(cl *client.Client) error { _, err := cl.FinishMany(c.ctx, items); return err }))
			}
		}
		return done
	}
	finishAll(n)
	c.eventually("a second task for every key", func() bool { return c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1`, tt.ID) >= 2*n })
	second := tasksOf()
	for i, k := range keys {
		ts := second[k.Key]
		require.Len(t, ts, 2, k.Key)
		require.NotNil(t, ts[0].completedAt)
		require.GreaterOrEqual(t, ts[1].createdAt.Sub(*ts[0].completedAt), maxAge, "%s: created before its data was stale", k.Key)
		require.Equal(t, prioOf(i), ts[1].priority, k.Key)
	}

	// Complete the second tasks of the first half only (the worker claims
	// by priority: urgent and high are the first 50 keys).
	finishAll(n / 2)
	c.eventually("a third task for the completed keys", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1`, tt.ID) >= 2*n+n/2
	})
	time.Sleep(maxAge) // the other half would be due by now if open tasks did not hold them
	third := tasksOf()
	for i, k := range keys {
		ts := third[k.Key]
		if i < n/2 {
			require.Len(t, ts, 3, k.Key)
			require.GreaterOrEqual(t, ts[2].createdAt.Sub(*ts[1].completedAt), maxAge, k.Key)
		} else {
			require.Len(t, ts, 2, "%s: its task is open, so it gets no other", k.Key)
			require.Nil(t, ts[1].completedAt)
		}
	}

	// One decision event per task, naming it and saying why.
	var decisions, distinct int
	require.NoError(t, c.pool.QueryRow(c.ctx, `SELECT count(*), count(DISTINCT data->>'task_id') FROM task_events
		WHERE stream_id = $1 AND type = 'freshness_rule.task_created'`, rule.ID).Scan(&decisions, &distinct))
	require.Equal(t, 2*n+n/2, decisions)
	require.Equal(t, decisions, distinct)
	var reason string
	require.NoError(t, c.pool.QueryRow(c.ctx, `SELECT data->>'reason' FROM task_events WHERE stream_id = $1
		AND type = 'freshness_rule.task_created' AND data->>'key' = 'T000' ORDER BY seq DESC LIMIT 1`, rule.ID).Scan(&reason))
	require.Regexp(t, `^T000: last completed \d+s ago > 3s; weight 25 × staleness \d\.\d\d = \d+\.\d → urgent$`, reason)

	// The rules and their keys equal the fold of the log; a key's state
	// that drifted from its tasks is found, and a rebuild repairs it.
	rep, err := replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify: %+v", rep.Differences)
	require.EqualValues(t, n, rep.Tables["freshness_keys"].Rows)
	_, err = c.pool.Exec(c.ctx, `UPDATE freshness_keys SET current_task_id = NULL WHERE key = 'T099'`)
	require.NoError(t, err)
	rep, err = replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.Len(t, rep.Differences, 1)
	require.Equal(t, "freshness_keys", rep.Differences[0].Table)
	require.Equal(t, []string{"current_task_id"}, rep.Differences[0].Changed)
	_, err = replay.Rebuild(c.ctx, c.pool, replay.RebuildConfig{})
	require.NoError(t, err)
	rep, err = replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "after the rebuild: %+v", rep.Differences)
	require.Equal(t, 2*n+n/2, c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1`, tt.ID), "no task was created twice")
}

type taskRow struct {
	priority    events.Priority
	params      string
	createdAt   time.Time
	completedAt *time.Time
}

// freshTasks reads the tasks of a rule's keys by key, oldest first.
func freshTasks(t *testing.T, c *cluster, ruleID string) map[string][]taskRow {
	t.Helper()
	rows, err := c.pool.Query(c.ctx, `SELECT substr(unique_key, length($1) + 1), priority, params::text, created_at, completed_at
		FROM worker_tasks WHERE unique_key LIKE $1 || '%' ORDER BY created_at`, "fresh:"+ruleID+":")
	require.NoError(t, err)
	out := map[string][]taskRow{}
	defer rows.Close()
	for rows.Next() {
		var key string
		var r taskRow
		require.NoError(t, rows.Scan(&key, &r.priority, &r.params, &r.createdAt, &r.completedAt))
		out[key] = append(out[key], r)
	}
	require.NoError(t, rows.Err())
	return out
}
