package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// run runs fn until the test ends and waits for it.
func run(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = fn(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitWake fails the test unless ch receives within d.
func waitWake(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("no wake: %s", what)
	}
}

func drainWakes(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func listenerPID(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&pid)
		if err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no LISTEN connection: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestListener(t *testing.T) {
	t.Parallel()
	url := storetest.NewDB(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)

	hub := store.NewHub()
	wake, unsubscribe := hub.Subscribe()
	defer unsubscribe()
	l, err := store.NewListener(store.ListenerConfig{URL: url, Hub: hub, InstanceID: "me", Logger: log,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, l.Ready(), "not ready before it connects")
	run(t, l.Run)

	waitWake(t, wake, 30*time.Second, "after connecting, consumers catch up")
	require.NoError(t, l.Ready())

	// Another instance's NOTIFY wakes the hub; our own is ignored. One
	// that says a create made tasks claimable also says so to the hub
	// (Hub.Unblocked: the claim gate gives a waiter its turn at once).
	unblocked := make(chan struct{}, 10)
	defer hub.OnUnblocked(func() { unblocked <- struct{}{} })()
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'me')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'me;claimable')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other')`)
	require.NoError(t, err)
	waitWake(t, wake, 30*time.Second, "a NOTIFY from another instance")
	require.Equal(t, int64(1), l.Received(), "our own NOTIFYs were ignored")
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other;claimable')`)
	require.NoError(t, err)
	waitWake(t, unblocked, 30*time.Second, "another instance's create made a task claimable")
	require.Equal(t, int64(2), l.Received())
	require.Empty(t, unblocked, "only that NOTIFY said so")

	// A NOTIFY that names the event types of the commits it announces wakes
	// only the subscribers that want one of them, as a local commit does.
	schedules, unsubscribeSchedules := hub.SubscribeTo(func(t string) bool { return t == "schedule.created" })
	defer unsubscribeSchedules()
	completions, unsubscribeCompletions := hub.SubscribeTo(func(t string) bool { return t == "task.completed" })
	defer unsubscribeCompletions()
	drainWakes(wake)
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other;types=schedule.created,task.claimed')`)
	require.NoError(t, err)
	waitWake(t, schedules, 30*time.Second, "a subscriber that wants a type the NOTIFY names")
	waitWake(t, wake, 30*time.Second, "a subscriber that wants every type")
	require.Empty(t, completions, "a subscriber that wants none of them sleeps on")
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other')`)
	require.NoError(t, err)
	waitWake(t, completions, 30*time.Second, "a NOTIFY that names no types (an older instance) wakes everyone")

	// The connection dies: the listener reconnects, wakes the hub (what was
	// sent meanwhile is lost) and hears NOTIFYs again.
	drainWakes(wake)
	pid := listenerPID(t, pool)
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	waitWake(t, wake, 30*time.Second, "after reconnecting")
	require.Eventually(t, func() bool { return l.Ready() == nil }, 30*time.Second, 10*time.Millisecond)
	require.NotEqual(t, pid, listenerPID(t, pool), "a new connection")
	drainWakes(wake)
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other')`)
	require.NoError(t, err)
	waitWake(t, wake, 30*time.Second, "a NOTIFY after the reconnect")
}

func TestNotifierCoalesces(t *testing.T) {
	t.Parallel()
	url := storetest.NewDB(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Another instance listens.
	otherHub := store.NewHub()
	otherWake, unsubscribe := otherHub.Subscribe()
	defer unsubscribe()
	l, err := store.NewListener(store.ListenerConfig{URL: url, Hub: otherHub, InstanceID: "other"})
	require.NoError(t, err)
	run(t, l.Run)
	waitWake(t, otherWake, 30*time.Second, "listener connected")

	hub := store.NewHub()
	wake, unsub := hub.Subscribe()
	defer unsub()
	n, err := store.NewNotifier(store.NotifierConfig{Querier: pool, Hub: hub, InstanceID: "me", Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	run(t, n.Run)

	// One commit: the local hub wakes at once, the other instance soon.
	n.Committed()
	waitWake(t, wake, time.Second, "local wake at commit")
	waitWake(t, otherWake, 30*time.Second, "the other instance")

	// A storm of commits costs at most one NOTIFY per interval, and one for
	// each quiet moment (5 ms without a commit) a loaded machine puts in it
	// (TestNotifyPacer has the rule without a clock).
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	before := n.Sent()
	quiet, last := 0, start
	for time.Since(start) < 300*time.Millisecond {
		if now := time.Now(); now.Sub(last) >= 2*time.Millisecond {
			quiet++
		}
		n.Committed()
		last = time.Now()
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(start)
	require.Eventually(t, func() bool { return n.Sent() > before }, 30*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let the trailing NOTIFY go
	sent := n.Sent() - before
	require.LessOrEqual(t, sent, int64(elapsed/(50*time.Millisecond))+2+int64(quiet), "at most one NOTIFY per interval")
	require.GreaterOrEqual(t, sent, int64(1))
}

// TestNotifyCarriedByCreate: a create after a quiet moment carries its
// NOTIFY in its own transaction (ADR 032), so the other instances hear of
// it at its commit with no sender in between: here the sender (Run) is not
// even running. Without a key the create is its own implicit transaction,
// with one a transaction of its own; a create in the same quiet moment
// leaves its NOTIFY to the sender, which sends it (here at shutdown).
func TestNotifyCarriedByCreate(t *testing.T) {
	t.Parallel()
	url := storetest.NewDB(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	admin := events.Meta{Actor: events.System("test")}
	setup, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	tt, err := setup.CreateTaskType(ctx, events.TaskTypeSpec{Name: "job", Label: "Job", ParamSchema: []byte(`{"type":"object"}`)}, admin)
	require.NoError(t, err)

	// The other instance's LISTEN connection, bare.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `LISTEN task_events`)
	require.NoError(t, err)
	heard := func(what string) string {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(waitCtx)
		require.NoError(t, err, what)
		return n.Payload
	}
	// instance is one instance's store with its notifier; its sender is
	// not running. An hour's interval: its quiet moment is six minutes.
	instance := func(id string) (*store.DB, *store.Notifier, <-chan struct{}) {
		hub := store.NewHub()
		wake, unsubscribe := hub.Subscribe()
		t.Cleanup(unsubscribe)
		n, err := store.NewNotifier(store.NotifierConfig{Querier: pool, Hub: hub, InstanceID: id, Interval: time.Hour})
		require.NoError(t, err)
		db, err := store.New(pool, store.Config{Projector: projections.Projector{}, AfterCommit: n.Committed, Notifier: n})
		require.NoError(t, err)
		return db, n, wake
	}
	create := func(db *store.DB, title, key string) {
		t.Helper()
		_, err := db.CreateTask(ctx, pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
			Title: title, Params: json.RawMessage(`{}`), UniqueKey: key}}, admin)
		require.NoError(t, err)
	}

	db, n, wake := instance("plain")
	create(db, "first", "")
	require.Equal(t, "plain;types=task.created;claimable", heard("the first create's NOTIFY, carried, saying its task is claimable"))
	waitWake(t, wake, time.Second, "the local hub at the commit")
	require.Equal(t, int64(1), n.Sent())
	require.Equal(t, int64(1), n.Carried())

	// The next create, in the same quiet moment, is the sender's to announce.
	create(db, "second", "")
	require.Equal(t, int64(1), n.Carried(), "one carried NOTIFY per quiet moment")
	senderCtx, stopSender := context.WithCancel(ctx)
	stopSender() // it sends what is pending, then returns
	require.NoError(t, n.Run(senderCtx))
	require.Equal(t, "plain;types=task.created", heard("the second create's NOTIFY, from the sender, naming what the commits it covers wrote (no hint: it covers any commits)"))
	require.Equal(t, int64(2), n.Sent())

	// With a unique key the create is a transaction; its commit carries the NOTIFY too.
	keyed, kn, _ := instance("keyed")
	create(keyed, "keyed", "k1")
	require.Equal(t, "keyed;types=task.created;claimable", heard("the keyed create's NOTIFY, carried"))
	require.Equal(t, int64(1), kn.Carried())

	// A task not claimable yet (run_at ahead): carried, without the hint.
	later, ln, _ := instance("later")
	runAt := time.Now().Add(time.Hour)
	_, err = later.CreateTask(ctx, pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: "later", Params: json.RawMessage(`{}`), AvailableAt: &runAt}}, admin)
	require.NoError(t, err)
	require.Equal(t, "later;types=task.created,(timed create)", heard("the scheduled create's NOTIFY, carried, no hint"))
	require.Equal(t, int64(1), ln.Carried())
}

// TestCreateTellsClaimable: a create that makes a pool task claimable at
// once says so after its commit (Config.AfterUnblock: the claim gate gives
// its longest-waiting long-poll the turn without reading first), through
// the batcher and in a transaction; one whose task waits for its run_at or
// for a dependency, or is assigned to a worker, does not.
func TestCreateTellsClaimable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	var told sync.Mutex
	count := 0
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, AfterUnblock: func() {
		told.Lock()
		count++
		told.Unlock()
	}})
	require.NoError(t, err)
	toldSoFar := func() int {
		told.Lock()
		defer told.Unlock()
		return count
	}
	admin := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "job", Label: "Job", ParamSchema: []byte(`{"type":"object"}`)}, admin)
	require.NoError(t, err)
	create := func(p events.NewTaskParams) string {
		t.Helper()
		p.Params = json.RawMessage(`{}`)
		task, err := db.CreateTask(ctx, pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: p}, admin)
		require.NoError(t, err)
		return task.ID
	}
	first := create(events.NewTaskParams{Title: "now"})
	require.Equal(t, 1, toldSoFar(), "a claimable task: told, as its create returns")
	create(events.NewTaskParams{Title: "keyed", UniqueKey: "k"})
	require.Equal(t, 2, toldSoFar(), "in a transaction too, at its commit")
	later := time.Now().Add(time.Hour)
	create(events.NewTaskParams{Title: "later", AvailableAt: &later})
	create(events.NewTaskParams{Title: "after", DependsOn: []string{first}})
	require.Equal(t, 2, toldSoFar(), "a task waiting for its run_at or a dependency: not told")
	worker, err := db.CreateUser(ctx, events.UserRegistered{Email: "w@test.invalid", FullName: "w", IsWorker: true, MaxConcurrentTasks: 1},
		"password", "not-a-real-hash", admin)
	require.NoError(t, err)
	create(events.NewTaskParams{Title: "yours", AssignedTo: worker.ID})
	require.Equal(t, 2, toldSoFar(), "a task assigned to a worker: left to the gate's read, which finds that worker")
}
