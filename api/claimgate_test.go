package api

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store"
)

// fakeProbe answers the gate's looks with what the test sets, and records
// what it was asked.
type fakeProbe struct {
	mu     sync.Mutex
	answer store.Claimable
	err    error
	asked  chan []string
	limit  int // the last look's
}

func (p *fakeProbe) set(c store.Claimable, err error) {
	p.mu.Lock()
	p.answer, p.err = c, err
	p.mu.Unlock()
}

func (p *fakeProbe) probe(_ context.Context, workers []string, limit int) (store.Claimable, error) {
	p.mu.Lock()
	c, err := p.answer, p.err
	p.limit = limit
	p.mu.Unlock()
	p.asked <- workers
	return c, err
}

// turned says which waiters have a turn waiting, consuming them.
func turned(ws ...*claimWaiter) []bool {
	out := make([]bool, len(ws))
	for i, w := range ws {
		select {
		case <-w.turn:
			out[i] = true
		default:
		}
	}
	return out
}

// The gate's decisions, one look at a time.
func TestClaimGateHandsOutTurns(t *testing.T) {
	p := &fakeProbe{asked: make(chan []string, 16)}
	g := newClaimGate(store.NewHub(), p.probe, zerolog.Nop())
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	waiter := func(id string, max int) *claimWaiter { // joined without starting the loop
		w := &claimWaiter{worker: id, max: max, turn: make(chan struct{}, 1)}
		g.waiters = append(g.waiters, w)
		return w
	}
	a, b, c := waiter(ids[0], 1), waiter(ids[1], 1), waiter(ids[2], 1)

	// Nothing claimable: nobody claims.
	g.dispatch(true)
	require.Equal(t, ids, <-p.asked)
	require.Equal(t, 3, p.limit, "the pool is counted up to what the waiters would take")
	require.Equal(t, []bool{false, false, false}, turned(a, b, c))

	// One pool task: the longest waiting claims it, alone.
	p.set(store.Claimable{Pool: 1}, nil)
	g.dispatch(true)
	<-p.asked
	require.Equal(t, []bool{true, false, false}, turned(a, b, c))

	// It found nothing (at capacity, say): the gate looks again without
	// it, and the next one claims.
	g.missed(a)
	g.dispatch(false)
	require.Equal(t, ids[1:], <-p.asked)
	require.Equal(t, []bool{false, true, false}, turned(a, b, c))

	// A task assigned to the last: it claims, and the pool's task goes to
	// the first in line again, since a wake forgets the misses.
	p.set(store.Claimable{Pool: 1, Assigned: []string{ids[2]}}, nil)
	g.dispatch(true)
	require.Equal(t, ids, <-p.asked)
	require.Equal(t, []bool{true, false, true}, turned(a, b, c))

	// More pool tasks than one waiter takes: as many waiters as cover them.
	big := waiter(uuid.NewString(), 3)
	p.set(store.Claimable{Pool: 2}, nil)
	g.dispatch(true)
	<-p.asked
	require.Equal(t, []bool{true, true, false, false}, turned(a, b, c, big))

	// A second long-poll of the same worker is asked about once.
	twin := waiter(ids[0], 1)
	p.set(store.Claimable{}, nil)
	g.dispatch(true)
	require.Equal(t, append(ids, big.worker), <-p.asked)
	require.Equal(t, []bool{false, false, false, false, false}, turned(a, b, c, big, twin))

	// The look failed: everyone claims, as without the gate.
	p.set(store.Claimable{}, errors.New("connection refused"))
	g.dispatch(true)
	<-p.asked
	require.Equal(t, []bool{true, true, true, true, true}, turned(a, b, c, big, twin))

	// The count is bounded, however many waiters would take.
	for range 11 {
		waiter(uuid.NewString(), 100)
	}
	g.dispatch(true)
	<-p.asked
	require.Equal(t, maxProbeCount, p.limit)

	// Everyone missed since the last wake: no look at all.
	for _, w := range g.waiters {
		w.missed = true
	}
	g.dispatch(false)
	require.Empty(t, p.asked)
}

// The loop: it looks on every wake and after a miss, while waiters wait.
func TestClaimGateLoop(t *testing.T) {
	hub := store.NewHub()
	p := &fakeProbe{asked: make(chan []string, 16), answer: store.Claimable{Pool: 1}}
	g := newClaimGate(hub, p.probe, zerolog.Nop())
	gotTurn := func(w *claimWaiter) {
		t.Helper()
		select {
		case <-w.turn:
		case <-time.After(10 * time.Second):
			t.Fatal("no turn came")
		}
	}
	a, b := g.join(uuid.NewString(), 1), g.join(uuid.NewString(), 1)
	hub.Wake()
	gotTurn(a)
	<-p.asked
	g.missed(a)
	gotTurn(b)
	<-p.asked

	// The last waiter out ends the loop: wakes are not looked at.
	g.leave(a)
	g.leave(b)
	hub.Wake()
	select {
	case ws := <-p.asked:
		t.Fatalf("looked for %v with no waiters", ws)
	case <-time.After(50 * time.Millisecond):
	}
	// The next waiter starts it again.
	c := g.join(uuid.NewString(), 1)
	defer g.leave(c)
	hub.Wake()
	gotTurn(c)
}

// A completion that unblocked tasks in this process (Hub.Unblocked) gives
// the longest waiting a turn at once, without a look: not to one that
// missed since the last wake, not to a waiter without a worker, and to
// one waiter only (the look of the same commit's wake serves the rest).
func TestClaimGateOffersUnblockedTasks(t *testing.T) {
	p := &fakeProbe{asked: make(chan []string, 16)}
	hub := store.NewHub()
	g := newClaimGate(hub, p.probe, zerolog.Nop())
	waiter := func(id string) *claimWaiter { // joined without starting the loop
		w := &claimWaiter{worker: id, max: 1, turn: make(chan struct{}, 1)}
		g.waiters = append(g.waiters, w)
		return w
	}
	anonymous, missed, first, second := waiter(""), waiter(uuid.NewString()), waiter(uuid.NewString()), waiter(uuid.NewString())
	missed.missed = true

	hub.Unblocked()
	require.Equal(t, []bool{false, false, true, false}, turned(anonymous, missed, first, second))
	require.Empty(t, p.asked, "no look")

	hub.Unblocked()
	hub.Unblocked()
	require.Equal(t, []bool{false, false, true, false}, turned(anonymous, missed, first, second),
		"turns do not pile up: the first claims once")
}

// While a waiter offered its turn (Hub.Unblocked) claims, the gate does
// not look beside it: the wake of the same commit, or of any other, waits
// until that claim ends, and is looked at then.
func TestClaimGateLooksAfterTheOfferedClaim(t *testing.T) {
	p := &fakeProbe{asked: make(chan []string, 16), answer: store.Claimable{Pool: 1}}
	hub := store.NewHub()
	g := newClaimGate(hub, p.probe, zerolog.Nop())
	ids := []string{uuid.NewString(), uuid.NewString()}
	waiter := func(id string) *claimWaiter { // joined without starting the loop
		w := &claimWaiter{worker: id, max: 1, turn: make(chan struct{}, 1)}
		g.waiters = append(g.waiters, w)
		return w
	}
	first, second := waiter(ids[0]), waiter(ids[1])
	kicked := func() bool {
		select {
		case <-g.kick:
			return true
		default:
			return false
		}
	}

	hub.Unblocked()
	require.Equal(t, []bool{true, false}, turned(first, second))
	g.dispatch(true) // the commit's wake
	require.Empty(t, p.asked, "no look beside the offered claim")
	require.Equal(t, []bool{false, false}, turned(first, second))

	// The offered claim found nothing (another instance was quicker): the
	// gate looks now, without it.
	g.missed(first)
	require.True(t, kicked())
	g.dispatch(false)
	require.Equal(t, []string{ids[1]}, <-p.asked)
	require.Equal(t, []bool{false, true}, turned(first, second))

	// An offered claim that takes its task ends its long-poll: the look
	// that a wake meanwhile asked for comes then.
	g.dispatch(true)
	<-p.asked
	turned(first, second)
	hub.Unblocked()
	require.Equal(t, []bool{true, false}, turned(first, second))
	require.False(t, kicked())
	g.dispatch(true)
	require.Empty(t, p.asked)
	g.leave(first)
	require.True(t, kicked(), "the look deferred for the offered claim")
	g.dispatch(false)
	require.Equal(t, []string{ids[1]}, <-p.asked)

	// With no wake meanwhile there is nothing to look at.
	hub.Unblocked()
	require.Equal(t, []bool{false, true}, turned(first, second))
	g.leave(second)
	require.False(t, kicked())
	require.Zero(t, g.offers)
}

// A completion's wake needs no look while the last look found nothing
// claimable for any waiter, with no limited type: the completion frees a
// slot, but there is no task for one. Whatever came since (an offer, a
// join, a wake of another kind, a look that left a waiter out) makes the
// next completion's wake look again.
func TestClaimGateSkipsCompletionsWhileNothingIsClaimable(t *testing.T) {
	p := &fakeProbe{asked: make(chan []string, 16)}
	g := newClaimGate(store.NewHub(), p.probe, zerolog.Nop())
	g.stop = make(chan struct{}) // join starts no loop: the test drives the gate
	a, b := g.join(uuid.NewString(), 1), g.join(uuid.NewString(), 1)
	require.True(t, g.completed(), "no look yet")

	g.dispatch(true)
	<-p.asked
	require.False(t, g.completed(), "nothing claimable for anyone: a completion changes nothing")

	g.offer() // a commit here made tasks claimable
	require.Equal(t, []bool{true, false}, turned(a, b))
	require.True(t, g.completed())
	g.missed(a) // the offered claim found nothing
	<-g.kick
	g.dispatch(false)
	require.Equal(t, []string{b.worker}, <-p.asked)
	require.True(t, g.completed(), "the look left a out, and a's slot may fit a task of its own")

	g.dispatch(true)
	<-p.asked
	require.False(t, g.completed())
	require.False(t, a.looked || b.looked, "they joined before any look")
	c := g.join(uuid.NewString(), 1)
	require.True(t, g.completed(), "nobody asked about c's own tasks")
	require.True(t, c.looked, "c joined an empty gate: a look instead of its first claim")
	<-g.kick
	d := g.join(uuid.NewString(), 1)
	require.False(t, d.looked, "the gate was no longer empty")
	g.leave(d)

	g.dispatch(true)
	<-p.asked
	require.False(t, g.completed())
	p.set(store.Claimable{Limited: true}, nil)
	g.dispatch(true)
	<-p.asked
	require.True(t, g.completed(), "a completion may make room in a limited type")

	p.set(store.Claimable{Assigned: []string{c.worker}}, nil)
	g.dispatch(true)
	<-p.asked
	require.True(t, g.completed())
	require.Equal(t, []bool{false, false, true}, turned(a, b, c))
}

// The loop: a wake that names only completions reaches the gate apart
// from the others, and is skipped while nothing is claimable; one that
// names anything else (or nothing) looks.
func TestClaimGateLoopSkipsCompletions(t *testing.T) {
	hub := store.NewHub()
	p := &fakeProbe{asked: make(chan []string, 16)}
	g := newClaimGate(hub, p.probe, zerolog.Nop())
	g.looks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "looks"}, []string{"outcome"})
	g.turns = prometheus.NewCounter(prometheus.CounterOpts{Name: "turns"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.looks)
	a := g.join(uuid.NewString(), 1)
	defer g.leave(a)
	hub.Wake("task.created")
	<-p.asked
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	skipped := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "skipped" {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	waitFor("the look to settle", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.empty })
	hub.Wake("task.completed")
	waitFor("the completion's wake to be skipped", func() bool { return skipped() == 1 })
	require.Empty(t, p.asked)

	for _, types := range [][]string{{"task.completed", "task.unblocked"}, nil, {"task.failed"}} {
		hub.Wake(types...)
		<-p.asked
	}
}
