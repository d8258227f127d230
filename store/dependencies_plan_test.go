package store

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// With no blocked task anywhere, the statement that follows every batched
// completion is one probe of worker_tasks_status: it walks no chain and
// reads no edge, even when the statistics still say many tasks are blocked
// (taken during a burst of dependencies that has since drained).
func TestUnblockingWithNothingBlockedIsOneProbe(t *testing.T) {
	e := newBatchEnv(t)
	_, err := e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status,
		created_at, updated_at, available_at, completed_at, version)
		SELECT gen_random_uuid(), 'task ' || g, $1, 'medium', 'blocked', now(), now(), now(), now(), 3
		  FROM generate_series(1, 20000) g`, e.typeID)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `ANALYZE worker_tasks`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET status = 'completed'`)
	require.NoError(t, err)
	var ids []string
	rows, err := e.db.pool.Query(e.ctx, `SELECT id::text FROM worker_tasks LIMIT 64`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	tx, err := e.db.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	_, err = tx.Exec(e.ctx, indexLookupsOnly)
	require.NoError(t, err)
	rows, err = tx.Query(e.ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+unblockBatchDependents, ids, e.db.Now(), dependencyMeta)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "worker_tasks_status", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
	require.Regexp(t, `Index Scan using \w+ on worker_tasks w \(never executed\)`, plan, "the chain's first step reads nothing")
}
