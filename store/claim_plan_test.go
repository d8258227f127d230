package store

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// At a million tasks (most of them done, as in a long-lived queue) the
// claim and the completion read worker_tasks through the indexes meant for
// each lookup, under the planner settings every batch runs with
// (indexLookupsOnly: a generic plan) and, for comparison, under a custom plan
// with PostgreSQL's defaults.
func TestClaimPlanAtAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million rows; skipped with -short")
	}
	e := newBatchEnv(t)
	w := e.user(t, "w", true, 2)
	// In slices of 50,000, each its own transaction: the consumer horizon is
	// cluster-wide, and one long insert would stall every other test package's
	// reactors on the same server.
	for from := 1; from <= 1000000; from += 50000 {
		_, err := e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status, assigned_to,
			created_at, updated_at, available_at, version)
			SELECT gen_random_uuid(), 'task ' || g, $1, (ARRAY['urgent','high','medium','low'])[1 + g % 4],
			       CASE WHEN g % 20 = 0 THEN 'pending' ELSE 'completed' END,
			       CASE WHEN g % 20 = 0 THEN NULL ELSE $2::uuid END,
			       now() - (g || ' ms')::interval, now(), now() - interval '1 day', 3
			  FROM generate_series($3::int, $3::int + 49999) g`, e.typeID, w, from)
		require.NoError(t, err)
	}
	_, err := e.db.pool.Exec(e.ctx, `ANALYZE worker_tasks; ANALYZE users`)
	require.NoError(t, err)

	workers := "ARRAY['" + w + "']::uuid[]"
	claim := "EXECUTE claim(" + workers + ", now(), '{\"" + w + "\":[{},{}]}', ARRAY[1])"
	claimPlain := strings.Replace(claim, "claim(", "claim_plain(", 1)
	complete := "EXECUTE complete(" + workers + ", '{\"" + w + "\":[\"" + w + "\",{},{}]}', now())"
	// The plans the batches run: each lookup through the index meant for it.
	for name, run := range map[string]string{"claim": claim, "claim_plain": claimPlain, "complete": complete} {
		plan := explain(t, e, indexLookupsOnly, run)
		require.NotContains(t, plan, "Seq Scan on worker_tasks", "%s:\n%s", name, plan)
		require.NotContains(t, plan, "Bitmap", "%s:\n%s", name, plan)
		want := map[string][]string{
			"claim":       {"worker_tasks_held", "worker_tasks_preassigned", "worker_tasks_queue", "worker_tasks_pkey"},
			"claim_plain": {"worker_tasks_held", "worker_tasks_preassigned", "worker_tasks_queue", "worker_tasks_pkey"},
			"complete":    {"Index Scan using worker_tasks_pkey"},
		}
		for _, index := range want[name] {
			require.Contains(t, plan, index, "%s:\n%s", name, plan)
		}
	}
	// PostgreSQL's own choice with today's statistics reads by index too.
	for name, run := range map[string]string{"claim": claim, "claim_plain": claimPlain, "complete": complete} {
		plan := explain(t, e, `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`, run)
		require.NotContains(t, plan, "Seq Scan on worker_tasks", "%s:\n%s", name, plan)
	}
}

// On a fresh queue (statistics taken while no task was ever assigned) the
// claim still counts the worker's tasks in progress through
// worker_tasks_held, never through worker_tasks_assignee, which would read
// the worker's whole history on every claim once it has one.
func TestClaimPlanOnAFreshQueue(t *testing.T) {
	e := newBatchEnv(t)
	w := e.user(t, "w", true, 2)
	_, err := e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status,
		created_at, updated_at, available_at, version)
		SELECT gen_random_uuid(), 'task ' || g, $1, 'medium', 'pending', now(), now(), now(), 1
		  FROM generate_series(1, 5000) g`, e.typeID)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `ANALYZE worker_tasks; ANALYZE users`)
	require.NoError(t, err)
	workers := "ARRAY['" + w + "']::uuid[]"
	for _, name := range []string{"claim", "claim_plain"} {
		plan := explain(t, e, indexLookupsOnly, "EXECUTE "+name+"("+workers+", now(), '{\""+w+"\":[{},{}]}', ARRAY[100])")
		require.Contains(t, plan, "worker_tasks_held", plan)
		require.NotContains(t, plan, "worker_tasks_assignee", plan)
		require.NotContains(t, plan, "worker_tasks_status", plan)
	}
}

// explain is the plan of a prepared claim or completion after settings ran
// in the same transaction (plain EXPLAIN: nothing runs).
func explain(t *testing.T, e *batchEnv, settings, execute string) string {
	t.Helper()
	conn, err := e.db.pool.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, sql := range []string{
		`DEALLOCATE ALL`,
		`BEGIN`,
		settings,
		`PREPARE claim(uuid[], timestamptz, jsonb, int[]) AS ` + claimStatements[true],
		`PREPARE claim_plain(uuid[], timestamptz, jsonb, int[]) AS ` + claimStatements[false],
		`PREPARE complete(uuid[], jsonb, timestamptz) AS ` + completeTasks,
	} {
		_, err := conn.Exec(e.ctx, sql, pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
	}
	defer func() {
		_, _ = conn.Exec(e.ctx, `ROLLBACK; DEALLOCATE ALL`, pgx.QueryExecModeSimpleProtocol)
	}()
	rows, err := conn.Query(e.ctx, `EXPLAIN `+execute, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	if testing.Verbose() {
		t.Logf("%s\n%s", settings, plan)
	}
	return plan
}
