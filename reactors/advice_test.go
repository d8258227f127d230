package reactors_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
)

// gatedAdvisor answers only once its gate opens, and counts calls.
type gatedAdvisor struct {
	gate  chan struct{}
	calls atomic.Int64
	once  sync.Once
}

func newGatedAdvisor() *gatedAdvisor { return &gatedAdvisor{gate: make(chan struct{})} }

func (g *gatedAdvisor) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedAdvisor) Advise(ctx context.Context, _ reactors.AdviceRequest) (reactors.Advice, error) {
	g.calls.Add(1)
	select {
	case <-g.gate:
		return reactors.Advice{Hint: "Try the mirror."}, nil
	case <-ctx.Done():
		return reactors.Advice{}, ctx.Err()
	}
}

// failKind fails worker's task with the given kind.
func (e *env) failKind(worker, taskID, kind, reason string) {
	e.t.Helper()
	_, _, err := e.db.UpdateTask(e.ctx, e.pool, taskID, system, func(t *events.Task) ([]events.Payload, error) {
		return t.Fail(worker, kind, reason, nil)
	})
	require.NoError(e.t, err)
}

// A slow advisor call delays only the failure it is about: a timeout that
// fails after it, which needs no advice, gets its retry while the call is
// still running. Before, the one retry reactor's batch waited for the call.
func TestSlowAdviceDoesNotDelayOtherRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	advisor := newGatedAdvisor()
	t.Cleanup(advisor.open)
	e.retryReactor("a", advisor)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 2})
	w := e.worker("Worker", 4)

	advised := e.createAssigned(tt, "Advised", "", w)
	require.NotNil(t, e.claim(w))
	e.fail(w, advised.ID, "API said 500")
	e.eventually("the advisor to be asked", func() bool { return advisor.calls.Load() == 1 })

	timedOut := e.createAssigned(tt, "Timed out", "", w)
	require.NotNil(t, e.claim(w))
	e.failKind(w, timedOut.ID, events.FailureTimeout, "ran past its timeout")
	require.Equal(t, events.RetryOutcomeRetried, *e.decided(timedOut.ID).RetryOutcome,
		"the timeout is retried while the advice call runs")
	require.Nil(t, e.get(advised.ID).RetryOutcome, "the advised failure waits for its answer")

	advisor.open()
	failed := e.decided(advised.ID)
	require.Equal(t, "Try the mirror.", ofType(e.stream(advised.ID), "task.retried")[0].Payload.(events.TaskRetried).Hint)
	require.NotNil(t, failed.RetryTaskID)
	require.EqualValues(t, 1, advisor.calls.Load())
	var left int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM retry_advice`).Scan(&left))
	require.Zero(t, left, "the advice record goes with the decision")
}

// countingAdvisor answers at once and counts calls.
type countingAdvisor struct{ calls atomic.Int64 }

func (c *countingAdvisor) Advise(context.Context, reactors.AdviceRequest) (reactors.Advice, error) {
	c.calls.Add(1)
	return reactors.Advice{Hint: "Slow down."}, nil
}

// The double asks seen around database restarts (960 calls for 932
// failures): an instance prepared a batch (asked Claude), its batch
// transaction failed with the database, it released its lease, and another
// instance prepared the same batch and asked again; a crash between the
// call and the commit did the same. Each failure now costs one call
// whichever instance, or process, prepares its batch next, and that one
// decides with the first answer.
func TestAdviceIsAskedOncePerFailureAcrossInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 2})
	w := e.worker("Worker", 4)
	for _, title := range []string{"one", "two", "three"} {
		task := e.createAssigned(tt, title, "", w)
		require.NotNil(t, e.claim(w))
		e.fail(w, task.ID, "API said 500")
	}

	advisor := &countingAdvisor{}
	// Instance a prepares and never commits (its batch failed, or it died):
	// only its Prepare runs.
	a, err := reactors.NewRetry(reactors.RetryConfig{DB: e.db, Advisor: advisor, InstanceID: "a", Logger: e.log})
	require.NoError(t, err)
	var evs []events.Envelope
	e.eventually("the failures to pass the horizon", func() bool {
		evs, err = e.db.ReadLog(e.ctx, e.pool, events.Position{}, 100, store.LogFilter{Types: []string{"task.failed"}})
		require.NoError(t, err)
		return len(evs) == 3
	})
	require.NoError(t, a.Reactors()[1].Prepare(e.ctx, evs))
	require.EqualValues(t, 3, advisor.calls.Load())

	// Instance b takes over the batch and decides it.
	e.retryReactor("b", advisor)
	for _, ev := range evs {
		failed := e.decided(ev.StreamID)
		require.Equal(t, "Slow down.", ofType(e.stream(failed.ID), "task.retried")[0].Payload.(events.TaskRetried).Hint,
			"b decides with a's answer")
	}
	require.EqualValues(t, 3, advisor.calls.Load(), "one call per failure")
}
