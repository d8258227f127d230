package replay_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// Dependencies through the store: a task waits blocked until every
// dependency's chain completed (through the batched completion, the general
// one and a retry), is cancelled when a chain ends otherwise (transitively)
// or keeps waiting when it asked to, and replay verifies it all, deps_left
// and counters included.
func TestDependenciesBlockUnblockAndCancel(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	admin := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "job", MaxRetries: 1}, admin)
	require.NoError(t, err)
	w, err := db.CreateUser(ctx, events.UserRegistered{Email: "w@x.io", FullName: "W", IsWorker: true, MaxConcurrentTasks: 10}, "worker-password", "x", admin)
	require.NoError(t, err)
	wm := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}

	create := func(title string, deps []string, onFailure string) (*events.Task, error) {
		return db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
			Title: title, Params: json.RawMessage(`{}`), DependsOn: deps, OnDependencyFailure: onFailure}}, admin)
	}
	mustCreate := func(title string, deps ...string) *events.Task {
		t.Helper()
		tk, err := create(title, deps, "")
		require.NoError(t, err)
		return tk
	}
	get := func(id string) *events.Task {
		t.Helper()
		tk, err := db.GetTask(ctx, db.Pool(), id)
		require.NoError(t, err)
		return tk
	}
	claim := func(id string) {
		t.Helper()
		got, err := db.Claim(ctx, w.ID, wm)
		require.NoError(t, err)
		require.NotNil(t, got, "nothing to claim, want %s", id)
		require.Equal(t, id, got.ID)
	}
	finish := func(id string, status events.Status, result string) {
		t.Helper()
		f := store.Finish{ID: id, Status: status, Reason: "boom"}
		if result != "" {
			f.Result = json.RawMessage(result)
		}
		outs, err := db.FinishTasks(ctx, w.ID, []store.Finish{f}, wm)
		require.NoError(t, err)
		require.NoError(t, outs[0].Err)
	}

	x, y := mustCreate("x"), mustCreate("y")
	d := mustCreate("d", x.ID, y.ID)
	require.Equal(t, events.StatusBlocked, d.Status)
	claim(x.ID)
	finish(x.ID, events.StatusCompleted, "") // the batched completion
	require.Equal(t, events.StatusBlocked, get(d.ID).Status)
	claim(y.ID)
	finish(y.ID, events.StatusCompleted, `{"ok":true}`) // the general one
	require.Equal(t, events.StatusPending, get(d.ID).Status)
	claim(d.ID)
	finish(d.ID, events.StatusCompleted, "")

	// A dependency already done does not block.
	e := mustCreate("e", x.ID)
	require.Equal(t, events.StatusPending, e.Status)
	claim(e.ID)
	finish(e.ID, events.StatusCompleted, "")

	// Retries: the dependency's retry completing unblocks.
	r := mustCreate("r")
	rd := mustCreate("rd", r.ID)
	claim(r.ID)
	finish(r.ID, events.StatusFailed, "")
	retry, err := db.CreateRetry(ctx, db.Pool(), r.ID, store.RetryParams{Meta: admin})
	require.NoError(t, err)
	// A new dependent of the failed task resolves through its chain.
	rd2 := mustCreate("rd2", r.ID)
	require.Equal(t, events.StatusBlocked, rd2.Status)
	claim(retry.ID)
	finish(retry.ID, events.StatusCompleted, "")
	require.Equal(t, events.StatusPending, get(rd.ID).Status)
	require.Equal(t, events.StatusPending, get(rd2.ID).Status)
	for range 2 {
		got, err := db.Claim(ctx, w.ID, wm)
		require.NoError(t, err)
		finish(got.ID, events.StatusCompleted, "")
	}

	// The end of a chain cancels its dependents transitively; a dependent
	// that asked to wait stays blocked until an admin releases it.
	f := mustCreate("f")
	c1 := mustCreate("c1", f.ID)
	c2 := mustCreate("c2", c1.ID)
	waits, err := create("waits", []string{f.ID}, events.OnDependencyFailureWait)
	require.NoError(t, err)
	claim(f.ID)
	finish(f.ID, events.StatusFailed, "")
	require.Equal(t, events.StatusBlocked, get(c1.ID).Status, "a retry may still come")
	_, _, err = db.UpdateTask(ctx, db.Pool(), f.ID, admin, func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(0) })
	require.NoError(t, err)
	for _, id := range []string{c1.ID, c2.ID} {
		got := get(id)
		require.Equal(t, events.StatusCancelled, got.Status, id)
	}
	require.Equal(t, events.StatusBlocked, get(waits.ID).Status)
	_, err = create("late", []string{f.ID}, "")
	require.ErrorContains(t, err, "depends_on[0]")
	released, err := db.ReleaseBlocked(ctx, db.Pool(), waits.ID, "go ahead", admin)
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, released.Status)

	// Bad input.
	_, err = create("missing", []string{"0190f1f6-0000-7000-8000-000000000000"}, "")
	require.ErrorContains(t, err, "depends_on[0]")
	_, err = create("twice", []string{x.ID, x.ID}, "")
	require.ErrorContains(t, err, "depends_on[1]")

	c, err := db.Counts(ctx, db.Pool())
	require.NoError(t, err)
	require.Zero(t, c.Blocked)
	requireClean(t, verify(t, pool))

	blocked := mustCreate("blocked", mustCreate("open").ID)
	require.Equal(t, events.StatusBlocked, blocked.Status)
	c, err = db.Counts(ctx, db.Pool())
	require.NoError(t, err)
	require.Equal(t, 1, c.Blocked)
	requireClean(t, verify(t, pool))
	_, err = pool.Exec(ctx, `UPDATE worker_tasks SET deps_left = 5 WHERE id = $1`, blocked.ID)
	require.NoError(t, err)
	require.False(t, verify(t, pool).Clean(), "a wrong deps_left is reported")
}
