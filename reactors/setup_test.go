package reactors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// clock is the store's clock; tests move it instead of sleeping.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// env is one test's database, store, hub and helpers.
type env struct {
	t     *testing.T
	ctx   context.Context
	url   string
	pool  *pgxpool.Pool
	db    *store.DB
	hub   *store.Hub
	clock *clock
	log   zerolog.Logger
	reg   *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := storetest.NewDB(t)
	return newEnvOn(t, url)
}

// newEnvOn opens another store on the database at url: another "instance".
func newEnvOn(t *testing.T, url string) *env {
	t.Helper()
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 20)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e := &env{t: t, ctx: ctx, url: url, pool: pool, hub: store.NewHub(), clock: &clock{},
		log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), reg: prometheus.NewRegistry()}
	e.db, err = store.New(pool, store.Config{Projector: projections.Projector{}, Now: e.clock.Now, AfterCommit: e.hub.Wake})
	require.NoError(t, err)
	return e
}

var system = events.Meta{Actor: events.System("test")}

func (e *env) taskType(spec events.TaskTypeSpec) *events.TaskType {
	e.t.Helper()
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("type_%d", time.Now().UnixNano())
	}
	tt, err := e.db.CreateTaskType(e.ctx, spec, system)
	require.NoError(e.t, err)
	return tt
}

// worker registers a worker with capacity limit and makes it online.
func (e *env) worker(name string, limit int) string {
	e.t.Helper()
	u, err := e.db.CreateUser(e.ctx, events.UserRegistered{
		Email: strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "@workers.example.com", FullName: name,
		IsWorker: true, MaxConcurrentTasks: limit,
	}, "worker-password", "not-a-real-hash", system)
	require.NoError(e.t, err)
	e.heartbeat(u.ID)
	return u.ID
}

func (e *env) heartbeat(workerID string) {
	e.t.Helper()
	_, err := e.db.Heartbeat(e.ctx, workerID, store.HeartbeatParams{Status: "working"},
		events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: workerID}})
	require.NoError(e.t, err)
}

func (e *env) createTask(tt *events.TaskType, title, desc string) *events.Task {
	e.t.Helper()
	return e.createAssigned(tt, title, desc, "")
}

// createAssigned creates a task assigned to worker, which claims it before
// anything in the pool (the retries the reactor creates meanwhile).
func (e *env) createAssigned(tt *events.TaskType, title, desc, worker string) *events.Task {
	e.t.Helper()
	t, err := e.db.CreateTask(e.ctx, e.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: title, Description: desc, Params: []byte(`{"ticker":"NVDA"}`), Priority: events.PriorityHigh,
		AssignedTo: worker,
	}}, system)
	require.NoError(e.t, err)
	return t
}

// claim claims for worker; nil when nothing is claimable.
func (e *env) claim(worker string) *store.TaskWithType {
	e.t.Helper()
	t, err := e.db.Claim(e.ctx, worker, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}})
	require.NoError(e.t, err)
	return t
}

// fail fails worker's task with kind error.
func (e *env) fail(worker, taskID, reason string) {
	e.t.Helper()
	_, _, err := e.db.UpdateTask(e.ctx, e.pool, taskID, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}},
		func(t *events.Task) ([]events.Payload, error) {
			return t.Fail(worker, events.FailureError, reason, nil)
		})
	require.NoError(e.t, err)
}

func (e *env) get(id string) *events.Task {
	e.t.Helper()
	t, err := e.db.GetTask(e.ctx, e.pool, id)
	require.NoError(e.t, err)
	return t
}

func (e *env) stream(id string) []events.Envelope {
	e.t.Helper()
	evs, err := e.db.Stream(e.ctx, e.pool, id)
	require.NoError(e.t, err)
	return evs
}

// ofType keeps the events of one type.
func ofType(evs []events.Envelope, typ string) []events.Envelope {
	var out []events.Envelope
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// eventuallyWithin bounds waits for reactors. It is generous: consumers
// read below the cluster-wide xid horizon, so any long write transaction on
// the test server (another package's replay test, a CREATE DATABASE under
// load) delays them, by design (DESIGN §2), without losing anything.
const eventuallyWithin = 90 * time.Second

// eventually polls cond until it holds or the deadline passes.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(eventuallyWithin)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// decided waits until the failed task id has a retry outcome.
func (e *env) decided(id string) *events.Task {
	e.t.Helper()
	var t *events.Task
	e.eventually("a retry decision on "+id, func() bool {
		t = e.get(id)
		return t.RetryOutcome != nil
	})
	return t
}

// runner runs reactors on this env until the test ends.
func (e *env) runner(instance string, rs ...reactors.Reactor) {
	e.t.Helper()
	r, err := reactors.NewRunner(reactors.RunnerConfig{DB: e.db, Hub: e.hub, InstanceID: instance, Reactors: rs,
		CatchUp: 500 * time.Millisecond, Logger: e.log, Registerer: e.reg})
	require.NoError(e.t, err)
	e.goRun(r.Run)
}

// goRun runs fn until the test ends and waits for it to return.
func (e *env) goRun(fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = fn(ctx) })
	e.t.Cleanup(func() { cancel(); wg.Wait() })
}

// retryReactor runs the retry reactor with advisor (nil: template only).
func (e *env) retryReactor(instance string, advisor reactors.Advisor) {
	e.t.Helper()
	r, err := reactors.NewRetry(reactors.RetryConfig{DB: e.db, Advisor: advisor, InstanceID: instance, Logger: e.log})
	require.NoError(e.t, err)
	e.runner(instance, r.Reactors()...)
}
