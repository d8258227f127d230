package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// A rule watching 10,000 keys, 5 of them due and 10,000 tasks of other
// types in history: a look reads only the due keys (an index range of
// freshness_keys_due, or freshness_keys_rule_due), and the batched
// completion reaches a key through its unique index, never a scan of the
// keys (ADR 023).
func TestFreshnessPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 10k keys; skipped with -short")
	}
	e := newBatchEnv(t)
	keys := make([]events.FreshnessKey, events.MaxFreshnessKeys)
	for i := range keys {
		keys[i] = events.FreshnessKey{Key: fmt.Sprintf("K%05d", i), Weight: 1 + i%100}
	}
	r, err := e.db.CreateFreshnessRule(e.ctx, events.FreshnessSpec{Name: "w", TaskTypeID: e.typeID, TitleTemplate: "Crawl {{key}}",
		ParamsTemplate: `{"ticker": "{{key}}"}`, MaxAgeSeconds: 3600}, keys, nil, e.admin)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE freshness_keys SET last_completed_at = now(), due_at = now() + interval '1 hour'
		WHERE key >= 'K00005'`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status, created_at, updated_at, available_at, version)
		SELECT gen_random_uuid(), 'task ' || g, $1, 'medium', 'in_progress', now(), now(), now(), 2 FROM generate_series(1, 10000) g`, e.typeID)
	require.NoError(t, err)
	for _, sql := range []string{`VACUUM ANALYZE freshness_keys`, `VACUUM ANALYZE worker_tasks`, `ANALYZE freshness_rules`} {
		_, err = e.db.pool.Exec(e.ctx, sql)
		require.NoError(t, err)
	}
	plan := func(sql string, args ...any) string {
		t.Helper()
		rows, err := e.db.pool.Query(e.ctx, `EXPLAIN `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		p := strings.Join(lines, "\n")
		if testing.Verbose() {
			t.Logf("%s\n%s", sql, p)
		}
		return p
	}
	now := time.Now()
	p := plan(`SELECT min(due_at) FROM freshness_keys WHERE due_at IS NOT NULL`)
	require.Contains(t, p, "freshness_keys_due", p)
	require.NotContains(t, p, "Seq Scan", p)
	p = plan(`SELECT DISTINCT rule_id::text FROM (SELECT rule_id FROM freshness_keys WHERE due_at <= $1 ORDER BY due_at LIMIT $2) due`, now, 500)
	require.Contains(t, p, "freshness_keys_due", p)
	require.NotContains(t, p, "Seq Scan", p)
	p = plan(`SELECT key, weight, rising, last_completed_at FROM freshness_keys
		WHERE rule_id = $1 AND due_at <= $2 ORDER BY due_at, key LIMIT $3`, r.ID, now, 500)
	require.Regexp(t, `Index Scan using freshness_keys_(rule_)?due`, p, "one of the due indexes: only due keys are read")
	require.NotContains(t, p, "Seq Scan", p)

	ds, err := e.db.CreateStaleTasks(e.ctx, 500, nil)
	require.NoError(t, err)
	require.Len(t, ds, 5, "only the due keys")

	// The batched completion of 100 tasks.
	rows, err := e.db.pool.Query(e.ctx, `SELECT id::text FROM worker_tasks WHERE status = 'in_progress' LIMIT 100`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	p = plan(completeTasks, ids, `{}`, now)
	require.NotContains(t, p, "Seq Scan on freshness_keys", p)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
}
