package reactors_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
)

// instance wires an env like cmd/task-service does: NOTIFY sender as the
// store's AfterCommit, a LISTEN connection, both running until the test ends.
func instance(t *testing.T, url, id string) *env {
	t.Helper()
	e := newEnvOn(t, url)
	n, err := store.NewNotifier(store.NotifierConfig{Querier: e.pool, Hub: e.hub, InstanceID: id, Logger: e.log})
	require.NoError(t, err)
	l, err := store.NewListener(store.ListenerConfig{URL: url, Hub: e.hub, InstanceID: id, Logger: e.log})
	require.NoError(t, err)
	e.db, err = store.New(e.pool, store.Config{Projector: projections.Projector{}, Now: e.clock.Now, AfterCommit: n.Committed})
	require.NoError(t, err)
	e.goRun(n.Run)
	e.goRun(l.Run)
	e.eventually("the listener to connect", func() bool { return l.Ready() == nil })
	return e
}

// Three instances on one database while 300 tasks fail through all of them:
// every failure gets exactly one retry.
func TestRunnerInstancesShareTheWork(t *testing.T) {
	t.Parallel()
	url := newEnv(t).url
	var envs []*env
	for i := range 3 {
		e := instance(t, url, fmt.Sprintf("instance-%d", i))
		e.retryReactor(fmt.Sprintf("instance-%d", i), nil)
		envs = append(envs, e)
	}
	e := envs[0]
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 1})
	const workers, perWorker = 10, 30
	var wg sync.WaitGroup
	var ids sync.Map
	for w := range workers {
		via := envs[w%3]
		worker := via.worker(fmt.Sprintf("Worker %d", w), 1)
		wg.Go(func() {
			for i := range perWorker {
				task := via.createAssigned(tt, fmt.Sprintf("task %d-%d", w, i), "", worker)
				ids.Store(task.ID, true)
				require.NotNil(t, via.claim(worker))
				via.fail(worker, task.ID, "boom")
			}
		})
	}
	wg.Wait()
	n := 0
	ids.Range(func(k, _ any) bool {
		n++
		failed := e.decided(k.(string))
		require.Equal(t, events.RetryOutcomeRetried, *failed.RetryOutcome)
		require.Len(t, ofType(e.stream(k.(string)), "task.retried"), 1)
		return true
	})
	require.Equal(t, workers*perWorker, n)
	var retries, retried int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT
		(SELECT count(*) FROM worker_tasks WHERE parent_task_id IS NOT NULL),
		(SELECT count(*) FROM task_events WHERE type = 'task.retried')`).Scan(&retries, &retried))
	require.Equal(t, n, retries)
	require.Equal(t, n, retried)
}

// Effects and checkpoint commit together: a batch whose handler fails
// leaves nothing behind and is handled again, once.
func TestRunnerRollsBackFailedBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.pool.Exec(e.ctx, `CREATE TABLE seen (seq bigint PRIMARY KEY, attempt int NOT NULL)`)
	require.NoError(t, err)
	var attempts atomic.Int32
	re := reactors.Reactor{Name: "seen", Types: []string{"task.created"},
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			a := attempts.Add(1)
			for _, ev := range evs {
				if _, err := tx.Exec(ctx, `INSERT INTO seen (seq, attempt) VALUES ($1, $2)`, ev.Seq, a); err != nil {
					return err
				}
			}
			if a <= 2 {
				return errors.New("injected failure after the writes")
			}
			return nil
		}}
	tt := e.taskType(events.TaskTypeSpec{})
	for i := range 5 {
		e.createTask(tt, fmt.Sprint("t", i), "")
	}
	e.runner("a", re)
	e.eventually("the batch to commit", func() bool {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM seen`).Scan(&n))
		return n == 5
	})
	var minAttempt int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT min(attempt) FROM seen`).Scan(&minAttempt))
	require.Equal(t, 3, minAttempt, "nothing from the failed attempts survived")
}

// A stop waits for the batch in flight, which commits.
func TestRunnerStopsAfterTheBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	re := reactors.Reactor{Name: "slow", Types: []string{"task.created"},
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			once.Do(func() { close(entered) })
			<-release
			return ctx.Err()
		}}
	r, err := reactors.NewRunner(reactors.RunnerConfig{DB: e.db, Hub: e.hub, InstanceID: "a", Reactors: []reactors.Reactor{re}, Logger: e.log})
	require.NoError(t, err)
	e.createTask(e.taskType(events.TaskTypeSpec{}), "t", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	<-entered
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while a batch was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-done
	lags, err := e.db.ReactorLags(e.ctx)
	require.NoError(t, err)
	require.Len(t, lags, 1)
	require.Zero(t, lags[0].EventsBehind, "the batch committed")
}

// Lag is measured against the visible log and exported.
func TestRunnerLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, e.db.EnsureCheckpoint(e.ctx, "retry", []string{"task.failed"}))
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 1})
	w := e.worker("Worker", 5)
	for i := range 3 {
		task := e.createAssigned(tt, fmt.Sprint("t", i), "", w)
		require.NotNil(t, e.claim(w))
		e.fail(w, task.ID, "x")
	}
	e.clock.Advance(time.Minute)
	var lag store.ReactorLag
	e.eventually("the failures to be visible", func() bool {
		lags, err := e.db.ReactorLags(e.ctx)
		require.NoError(t, err)
		lag = lags[0]
		return lag.EventsBehind == 3
	})
	require.Equal(t, "retry", lag.Name)
	require.GreaterOrEqual(t, lag.SecondsBehind, 60.0)

	stats, err := e.db.Stats(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 3, stats.FailedAwaitingRetry)
	require.Equal(t, 3, stats.ReactorLag[0].EventsBehind)

	e.retryReactor("a", nil)
	// The failures are of kind error: "retry" passes them over at once and
	// "retry_advice" decides them, so both gauges must drop.
	e.eventually("the lag gauges to drop to 0", func() bool {
		return gauge(t, e, "taskservice_reactor_lag_events", "retry") == 0 &&
			gauge(t, e, "taskservice_reactor_lag_events", "retry_advice") == 0
	})
	stats, err = e.db.Stats(e.ctx)
	require.NoError(t, err)
	require.Zero(t, stats.FailedAwaitingRetry)
	require.Zero(t, stats.ReactorLag[0].EventsBehind)
	require.Zero(t, stats.ReactorLag[0].SecondsBehind)
}

// gauge reads the reactor's series of a gauge vector; -1 when absent.
func gauge(t *testing.T, e *env, name, reactor string) float64 {
	if v, ok := series(t, e, name, "reactor", reactor); ok {
		return v
	}
	return -1
}

// series reads the series of a counter or gauge vector whose label has
// value; ok is false when there is none.
func series(t *testing.T, e *env, name, label, value string) (v float64, ok bool) {
	t.Helper()
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// Events of a transaction that is still older than a running one are
// hidden, not lost: Pending says so, and they turn visible when it ends.
func TestPendingSeesHiddenEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, e.db.EnsureCheckpoint(e.ctx, "watch", []string{"task.created"}))
	blocker, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(e.ctx) }()
	_, err = blocker.Exec(e.ctx, `SELECT pg_current_xact_id()`) // takes an xid older than the event's
	require.NoError(t, err)
	e.createTask(e.taskType(events.TaskTypeSpec{}), "t", "")
	work, err := e.db.Pending(e.ctx, "watch", []string{"task.created"})
	require.NoError(t, err)
	require.False(t, work.Visible)
	require.True(t, work.Hidden)
	require.NoError(t, blocker.Rollback(e.ctx))
	e.eventually("the event to turn visible", func() bool {
		work, err := e.db.Pending(e.ctx, "watch", []string{"task.created"})
		require.NoError(t, err)
		return work.Visible
	})
}

// A dormant reactor's checkpoint moves to the log's head at start, on the
// catch-up ticker and as the runner stops, never on a commit's wake, and
// its events are not handled; a reactor beside it on the same events is
// woken and handles them as before.
func TestDormantReactorSleepsThroughWakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var awake, dormant atomic.Int32
	count := func(n *atomic.Int32) func(context.Context, pgx.Tx, []events.Envelope) error {
		return func(_ context.Context, _ pgx.Tx, evs []events.Envelope) error {
			n.Add(int32(len(evs)))
			return nil
		}
	}
	behind := func() int {
		lags, err := e.db.ReactorLags(e.ctx)
		require.NoError(t, err)
		for _, l := range lags {
			if l.Name == "dormant" {
				return l.EventsBehind
			}
		}
		t.Fatal("no lag for the dormant reactor")
		return 0
	}
	tt := e.taskType(events.TaskTypeSpec{})
	e.createTask(tt, "before the start", "")
	// Other tests' transactions on the server may hide the event for a
	// while; the dormant reactor's move at start must see it.
	require.NoError(t, e.db.EnsureCheckpoint(e.ctx, "dormant", []string{"task.created"}))
	e.eventually("the first event to be visible", func() bool { return behind() == 1 })
	// The awake reactor has a catch-up ticker of its own (events hidden
	// past its quick re-reads wait for it); the dormant one's never ticks
	// during the test.
	e.runner("a", reactors.Reactor{Name: "awake", Types: []string{"task.created"}, Handle: count(&awake)})
	r, err := reactors.NewRunner(reactors.RunnerConfig{DB: e.db, Hub: e.hub, InstanceID: "a", CatchUp: time.Hour, Logger: e.log,
		Reactors: []reactors.Reactor{{Name: "dormant", Types: []string{"task.created"}, Handle: count(&dormant), Dormant: true}}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	e.eventually("both reactors to start at the log's head", func() bool { return awake.Load() == 1 && behind() == 0 })

	for i := range 3 {
		e.createTask(tt, fmt.Sprint("t", i), "") // each commit wakes the hub
		e.eventually("the awake reactor to handle the create", func() bool { return awake.Load() == int32(2+i) })
	}
	require.Equal(t, 3, behind(), "the commits' wakes did not move the dormant reactor")

	// The awake reactor saw every event, so all are visible: the stop's
	// last move takes the dormant one past them.
	cancel()
	<-done
	require.Zero(t, behind(), "the stop's last move")
	require.Zero(t, dormant.Load(), "a dormant reactor handles nothing")
}
