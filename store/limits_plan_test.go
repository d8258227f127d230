package store

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// A limited type's backlog is read only as far as its room: the lock
// statement probes it for one task and the claim reads at most the room,
// in index order, never the whole backlog (a hashed subplan or a sort
// would read every entry).
func TestLimitedClaimReadsOnlyItsRoom(t *testing.T) {
	e := newLimitsEnv(t)
	capped := e.limitedType(t, "capped", events.TypeLimits{MaxInProgress: ptr(3)})
	w := e.user(t, "w", true, 10)
	_, err := e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status, created_at, updated_at,
		available_at, version, gated, scheduled)
		SELECT gen_random_uuid(), 'task ' || g, $1, 'medium', 'pending', now(), now(), now() - interval '1 day', 1, true, false
		  FROM generate_series(1, 5000) g`, capped)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `ANALYZE worker_tasks; ANALYZE task_types`)
	require.NoError(t, err)

	conn, err := e.db.pool.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(e.ctx, `BEGIN`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(e.ctx, `ROLLBACK`, pgx.QueryExecModeSimpleProtocol) }()
	_, err = conn.Exec(e.ctx, indexLookupsOnly)
	require.NoError(t, err)
	analyze := func(sql string, args ...any) string {
		t.Helper()
		rows, err := conn.Query(e.ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	lock := analyze(lockStatements[false][true], []string{w})
	claim := analyze(claimStatements[true], []string{w}, e.db.Now(), `{"`+w+`":[{},{}]}`, []int32{10})
	// Every scan of worker_tasks returns a handful of rows.
	scan := regexp.MustCompile(`Index (?:Only )?Scan using \w+ on worker_tasks \w+ \(actual rows=(\d+) loops=(\d+)\)`)
	for name, plan := range map[string]string{"lock": lock, "claim": claim} {
		require.NotContains(t, plan, "hashed SubPlan", "%s:\n%s", name, plan)
		found := scan.FindAllStringSubmatch(plan, -1)
		require.NotEmpty(t, found, "%s:\n%s", name, plan)
		for _, m := range found {
			rows, _ := strconv.Atoi(m[1])
			require.LessOrEqual(t, rows, 3, "%s reads the backlog:\n%s", name, plan)
		}
	}
	require.Contains(t, claim, "(actual rows=3 loops=1)\n", "the claim took 3:\n%s", claim)
}
