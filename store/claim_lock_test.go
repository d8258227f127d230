package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// lockUserRow holds worker's users row in another transaction, as another
// instance's claim or an admin's edit would, until the returned func runs.
func (e *batchEnv) lockUserRow(t *testing.T, worker string) (release func()) {
	t.Helper()
	tx, err := e.db.pool.Begin(e.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, worker)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return func() { require.NoError(t, tx.Rollback(e.ctx)) }
}

// A batch leaves out a worker whose row another transaction holds, and
// claims for the others at once.
func TestClaimBatchLeavesOutALockedWorker(t *testing.T) {
	e := newBatchEnv(t)
	a, b := e.user(t, "a", true, 1), e.user(t, "b", true, 1)
	e.task(t, "one", events.PriorityMedium, "")
	e.task(t, "two", events.PriorityMedium, "")
	release := e.lockUserRow(t, a)
	defer release()

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	outs := e.db.claims.runAll(ctx, []claimRequest{claimReq(t, a), claimReq(t, b)})
	require.ErrorIs(t, outs[0].err, errWorkerLocked)
	require.NoError(t, outs[1].err, "b's claim does not wait for a's row")
	require.NotNil(t, outs[1].res)
	var inProgress int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM worker_tasks WHERE status = 'in_progress'`).Scan(&inProgress))
	require.Equal(t, 1, inProgress, "a locked worker claims nothing in the batch")
}

// While worker a's row is locked, a's claim waits for it alone and worker
// b's claims on the same instance go through; a gets its task once the row
// is free. Before, the batch waited for a's row and b's claim with it.
func TestLockedWorkerRowDoesNotHoldBackOtherClaims(t *testing.T) {
	e := newBatchEnv(t)
	a, b := e.user(t, "a", true, 1), e.user(t, "b", true, 3)
	for range 4 {
		e.task(t, "job", events.PriorityMedium, "")
	}
	release := e.lockUserRow(t, a)

	type result struct {
		task *TaskWithType
		err  error
	}
	aDone := make(chan result, 1)
	go func() {
		tk, err := e.db.Claim(e.ctx, a, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: a}})
		aDone <- result{tk, err}
	}()
	// a's claim reaches the database first: it waits on the row lock.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, e.db.pool.QueryRow(e.ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting))
		return waiting > 0
	}, 5*time.Second, 10*time.Millisecond, "a's claim waits on its row")

	for range 3 {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		tk, err := e.db.Claim(ctx, b, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: b}})
		cancel()
		require.NoError(t, err, "b's claim is not held back by a's row")
		require.NotNil(t, tk)
	}
	select {
	case r := <-aDone:
		t.Fatalf("a's claim ended while its row was locked: %+v", r)
	default:
	}

	release()
	select {
	case r := <-aDone:
		require.NoError(t, r.err)
		require.NotNil(t, r.task, "a claims the task left once its row is free")
		require.Equal(t, a, *r.task.AssignedTo)
	case <-time.After(10 * time.Second):
		t.Fatal("a's claim did not finish after its row was released")
	}
}

// A claim that can find nothing locks no worker row, so its transaction
// takes no xid and its commit flushes no WAL (lockStatement): the claim a
// worker makes as it starts each long-poll is usually that one. A row lock
// leaves its xid in the row's xmax.
func TestEmptyClaimLocksNoWorkerRow(t *testing.T) {
	e := newBatchEnv(t)
	worker := e.user(t, "w", true, 1)
	xmax := func() string {
		t.Helper()
		var x string
		require.NoError(t, e.db.Pool().QueryRow(e.ctx, `SELECT xmax::text FROM users WHERE id = $1`, worker).Scan(&x))
		return x
	}
	// The first claim learns that no limited type exists (and may lock).
	_, err := e.db.Claim(e.ctx, worker, events.Meta{})
	require.NoError(t, err)
	before := xmax()
	none, err := e.db.Claim(e.ctx, worker, events.Meta{})
	require.NoError(t, err)
	require.Nil(t, none)
	require.Equal(t, before, xmax(), "an empty claim locked the worker's row")

	id := e.task(t, "one", events.PriorityMedium, "")
	got, err := e.db.Claim(e.ctx, worker, events.Meta{})
	require.NoError(t, err)
	require.Equal(t, id, got.ID)
	require.NotEqual(t, before, xmax(), "a claim that takes a task locks its worker's row")
}
