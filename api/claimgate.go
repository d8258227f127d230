package api

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// claimGate stands between the hub and the instance's waiting long-poll
// claims. Every commit wakes the hub, and most commits (claims,
// completions) make nothing claimable. Instead of every waiter claiming on
// every wake (a claim that finds nothing still locks its worker's row and
// commits), the gate reads once what a claim could find and hands turns to
// as many waiters as that can serve: those with tasks assigned to them,
// then the longest waiting until their max covers the pool's tasks
// (ADR 016). A waiter given a turn that finds nothing (at capacity, or
// another instance was quicker) tells the gate, which looks again without
// it until the next wake.
type claimGate struct {
	hub   *store.Hub
	probe func(ctx context.Context, workers []string, limit int) (store.Claimable, error)
	log   zerolog.Logger
	// looks (by outcome) and turns count for operators; nil counts nothing.
	looks *prometheus.CounterVec
	turns prometheus.Counter

	mu      sync.Mutex
	waiters []*claimWaiter // the longest waiting first
	stop    chan struct{}  // ends the running loop; nil when none runs
	kick    chan struct{}  // look again: a waiter given a turn found nothing
	// offers counts the waiters given a turn by offer whose claim has not
	// ended yet. While there are any the gate does not look: a look beside
	// that claim would read the same task, compete with the claim for the
	// database and hand another waiter a turn for a task being taken. It
	// looks when the last of them is done (deferred), if a wake or a miss
	// came meanwhile.
	offers   int
	deferred bool
	// empty: the last look found nothing claimable for any waiter, with no
	// limited type (whose room a completion frees), and nothing since can
	// have changed that but claims and completions. A completion's wake
	// then needs no look: it frees a slot of its worker, but there is no
	// task for any slot; one that unblocked tasks says so in its wake. A
	// join, an offer or a wake of any other kind ends it (changes bumps).
	empty   bool
	changes uint64
}

// claimWaiter is one waiting long-poll.
type claimWaiter struct {
	worker  string // canonical UUID; "" when the subject is none (never given a turn)
	max     int
	turn    chan struct{} // 1-buffered: claim now
	missed  bool          // given a turn since the last wake and found nothing
	offered bool          // given its turn by offer, its claim not ended
	// looked: it joined while the gate was empty, and the gate looks for
	// it instead of its first claim (join).
	looked bool
}

// probeTimeout bounds one look; on error every waiter gets a turn.
const probeTimeout = 5 * time.Second

// maxProbeCount bounds the pool tasks one look counts. Past it, the first
// waiters whose max covers it claim; their commits wake the gate for the
// next ones. Waiters are rare while the pool is that deep: a claim with a
// free slot finds a task at once.
const maxProbeCount = 10 * store.MaxClaimMany

func newClaimGate(hub *store.Hub, probe func(context.Context, []string, int) (store.Claimable, error), log zerolog.Logger) *claimGate {
	g := &claimGate{hub: hub, probe: probe, log: log, kick: make(chan struct{}, 1)}
	hub.OnUnblocked(g.offer) // for the gate's life, which is the server's
	return g
}

// offer gives the longest waiting (that has not missed since the last wake)
// a turn at once: a completion in this process has just made blocked tasks
// pending. Its claim need not wait for the look the same commit's wake
// starts, nor for a look still reading from before that commit. If the
// tasks are not for it (another's, or past a limit), its claim finds
// nothing and it tells the gate, as after any turn.
func (g *claimGate) offer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changed()
	for _, w := range g.waiters {
		if !w.missed && w.worker != "" {
			w.give()
			if !w.offered {
				w.offered = true
				g.offers++
			}
			if g.turns != nil {
				g.turns.Inc()
			}
			return
		}
	}
}

// settled says that w's claim ended (it found tasks and leaves, or found
// nothing); true when the gate should look now, for what came while an
// offered claim ran. Call with g.mu held.
func (g *claimGate) settled(w *claimWaiter) (look bool) {
	if !w.offered {
		return false
	}
	w.offered = false
	g.offers--
	if g.offers == 0 && g.deferred {
		g.deferred = false
		return true
	}
	return false
}

func (g *claimGate) kickLoop() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// join registers a waiter. Call it before the waiter's first claim: a
// commit after that claim's snapshot then reaches the gate with the waiter
// in it. The gate's loop runs while it has waiters.
func (g *claimGate) join(worker string, max int) *claimWaiter {
	w := &claimWaiter{max: max, turn: make(chan struct{}, 1)}
	if id, err := uuid.Parse(worker); err == nil {
		w.worker = id.String()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiters = append(g.waiters, w)
	if g.empty && w.worker != "" {
		// Nothing was claimable for anyone at the last look, and only
		// claims and completions came since: a claim now would find
		// nothing in the pool, and the look that asks about this worker
		// too (its own tasks) costs less than a claim that finds nothing
		// (ADR 037).
		w.looked = true
		g.kickLoop()
	}
	g.changed() // the last look did not ask about it
	if g.stop == nil {
		// Only events make tasks claimable, and never a claim (while a
		// limited type exists, a claim's wake names no type). A
		// completion's wake comes apart (see empty).
		wake, unsubscribe := g.hub.SubscribeTo(store.Except(claimedType, completedType))
		ended, unsubscribeEnded := g.hub.SubscribeTo(func(t string) bool { return t == completedType })
		g.stop = make(chan struct{})
		go g.loop(wake, ended, func() { unsubscribe(); unsubscribeEnded() }, g.stop)
	}
	return w
}

var (
	claimedType   = events.TaskClaimed{}.EventType()
	completedType = events.TaskCompleted{}.EventType()
)

// changed ends empty. Call with g.mu held.
func (g *claimGate) changed() {
	g.empty = false
	g.changes++
}

// leave unregisters a waiter; the last one out ends the loop.
func (g *claimGate) leave(w *claimWaiter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := slices.Index(g.waiters, w); i >= 0 {
		g.waiters = slices.Delete(g.waiters, i, i+1)
	}
	if g.settled(w) {
		g.kickLoop()
	}
	if len(g.waiters) == 0 && g.stop != nil {
		close(g.stop)
		g.stop = nil
		g.changed() // no loop sees the wakes until the next join
	}
}

// missed says w's turn found nothing: look again without it.
func (g *claimGate) missed(w *claimWaiter) {
	g.mu.Lock()
	w.missed = true
	g.settled(w)
	g.mu.Unlock()
	g.kickLoop()
}

func (g *claimGate) loop(wake, ended <-chan struct{}, unsubscribe func(), stop <-chan struct{}) {
	defer unsubscribe()
	for {
		select {
		case <-stop:
			return
		case <-wake:
			g.woken(ended)
		case <-ended:
			select {
			case <-wake: // a wake that named more than completions
				g.woken(ended)
				continue
			default:
			}
			if g.completed() {
				g.dispatch(true)
			}
		case <-g.kick:
			g.dispatch(false)
		}
	}
}

// woken looks after a wake that may have made tasks claimable. The same
// wake may have reached ended too (it named a completion as well, or no
// type): this look serves it.
func (g *claimGate) woken(ended <-chan struct{}) {
	select {
	case <-ended:
	default:
	}
	g.mu.Lock()
	g.changed()
	g.mu.Unlock()
	g.dispatch(true)
}

// completed says whether a wake that named only completions needs a look:
// not while the gate is empty.
func (g *claimGate) completed() (look bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.empty {
		g.count("skipped", 0)
		return false
	}
	return true
}

// dispatch looks at what is claimable and hands out turns. After a wake
// every waiter may be chosen again; after a miss, only those that have not
// missed since. While an offered claim runs it only notes that a look is
// due (see offers).
func (g *claimGate) dispatch(woken bool) {
	g.mu.Lock()
	if woken {
		for _, w := range g.waiters {
			w.missed = false
		}
	}
	if g.offers > 0 {
		g.deferred = true
		g.changed()
		g.mu.Unlock()
		return
	}
	var workers []string
	limit := 0
	everyone := true // the look asks about every waiter with a worker
	for _, w := range g.waiters {
		if !w.missed && w.worker != "" {
			if !slices.Contains(workers, w.worker) {
				workers = append(workers, w.worker)
			}
			limit += w.max
		} else if w.worker != "" {
			everyone = false
		}
	}
	changes := g.changes
	g.mu.Unlock()
	if len(workers) == 0 {
		return
	}
	limit = min(limit, maxProbeCount)
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	found, err := g.probe(ctx, workers, limit)
	cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.changed()
		// Without the look, do what the look saves: everyone claims.
		g.log.Warn().Err(err).Msg("long-poll: reading what is claimable failed; every waiter claims")
		g.count("error", len(g.waiters))
		for _, w := range g.waiters {
			w.give()
		}
		return
	}
	g.empty = found.Pool == 0 && len(found.Assigned) == 0 && !found.Limited && everyone && g.changes == changes
	pool, given := found.Pool, 0
	for _, w := range g.waiters {
		if w.missed || w.worker == "" {
			continue
		}
		if pool > 0 || slices.Contains(found.Assigned, w.worker) {
			w.give()
			given++
			pool -= w.max
		}
	}
	outcome := "none"
	if found.Pool > 0 || len(found.Assigned) > 0 {
		outcome = "some"
	}
	g.count(outcome, given)
}

func (g *claimGate) count(outcome string, turns int) {
	if g.looks != nil {
		g.looks.WithLabelValues(outcome).Inc()
		g.turns.Add(float64(turns))
	}
}

func (w *claimWaiter) give() {
	select {
	case w.turn <- struct{}{}:
	default:
	}
}
