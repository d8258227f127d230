package store

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// Claimable counts what claims could take now, as the claim sees it: the
// pool's pending tasks available now, up to the limit, and which of the
// workers asked about have pending tasks of their own.
func TestClaimable(t *testing.T) {
	e := newBatchEnv(t)
	a, b, c := e.user(t, "a", true, 5), e.user(t, "b", true, 5), e.user(t, "c", true, 5)
	claimable := func(workers []string, limit int) Claimable {
		t.Helper()
		got, err := e.db.Claimable(e.ctx, workers, limit)
		require.NoError(t, err)
		return got
	}
	require.Equal(t, Claimable{Pool: 0, Assigned: []string{}}, claimable([]string{a, b}, 10))

	for range 3 {
		e.task(t, "pool", events.PriorityMedium, "")
	}
	e.task(t, "a's", events.PriorityMedium, a)
	e.task(t, "c's", events.PriorityMedium, c)
	later := e.task(t, "later", events.PriorityMedium, "")
	_, err := e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET available_at = now() + interval '1 hour' WHERE id = $1`, later)
	require.NoError(t, err)

	require.Equal(t, Claimable{Pool: 3, Assigned: []string{a}}, claimable([]string{a, b}, 10),
		"the task not yet available is not counted, nor c's (not asked about)")
	require.Equal(t, 2, claimable([]string{a, b}, 2).Pool, "counted up to the limit")

	// Claimed tasks are no longer claimable.
	got, err := e.db.ClaimMany(e.ctx, a, 5, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: a}})
	require.NoError(t, err)
	require.Len(t, got, 4, "a's own task and the pool's three")
	require.Equal(t, Claimable{Pool: 0, Assigned: []string{c}}, claimable([]string{a, b, c}, 10))
}

// The look runs its generic plan from its first execution on a connection:
// PostgreSQL would otherwise plan it afresh five times on each, 10 ms or
// more of planning each time on a loaded machine, paid by a waiting
// long-poll before its wake.
func TestClaimablePlansOncePerConnection(t *testing.T) {
	e := newBatchEnv(t)
	a := e.user(t, "a", true, 5)
	cfg := e.db.pool.Pool.Config().Copy()
	cfg.MaxConns = 1 // one connection, whose prepared statements are read below
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db, err := New(pool, Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	for range 3 {
		_, err := db.Claimable(e.ctx, []string{a}, 10)
		require.NoError(t, err)
	}
	var generic, custom int
	// The first look has the limited branch (a new store assumes a limited
	// type may exist), the next ones are plain.
	require.NoError(t, pool.QueryRow(e.ctx, `SELECT sum(generic_plans)::int, sum(custom_plans)::int FROM pg_prepared_statements
		WHERE statement IN ($1, $2)`, claimableSQL, claimablePlainSQL).Scan(&generic, &custom))
	require.Equal(t, 0, custom, "no custom plan")
	require.Equal(t, 3, generic, "the generic plan each time")
}

// While no limited type exists the look reads the plain pool; a limited
// type created since (here or on another instance) is seen by that read,
// which then looks again with the limited types' tasks counted as the
// claim would take them.
func TestClaimableSeesALimitedTypeCreatedSince(t *testing.T) {
	e := newLimitsEnv(t)
	a := e.user(t, "a", true, 5)
	plain := e.limitedType(t, "plain", events.TypeLimits{})
	e.taskOf(t, plain, `{}`, "")
	c, err := e.db.Claimable(e.ctx, []string{a}, 10)
	require.NoError(t, err)
	require.Equal(t, Claimable{Pool: 1, Assigned: []string{}}, c)
	require.False(t, e.db.limited.Load(), "no limited type: the next looks are plain")

	capped := e.limitedType(t, "capped", events.TypeLimits{MaxInProgress: ptr(2)})
	for range 3 {
		e.taskOf(t, capped, `{}`, "")
	}
	e.taskOf(t, capped, `{}`, a)
	e.db.limited.Store(false) // as on an instance that has not claimed since the type was limited
	c, err = e.db.Claimable(e.ctx, []string{a}, 10)
	require.NoError(t, err)
	require.Equal(t, 3, c.Pool, "the plain task and two of the capped type's (its room)")
	require.Equal(t, []string{a}, c.Assigned)
	require.True(t, c.Limited)
	require.True(t, e.db.limited.Load(), "the claims take the limited branch from now on")
}
