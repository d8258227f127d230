package store

import (
	"slices"
	"sync"

	"github.com/clawdbot/task-service/events"
)

// Hub fans wake-ups out to everything in this process that waits for new
// events: reactors, long-polling claimers, SSE tails. A wake is a hint that
// the table may have news, never the news itself; subscribers re-read.
// Wakes coalesce: a subscriber that has not consumed the last wake gets no
// second one, so a slow subscriber never blocks Wake.
//
// A wake may name the event types its commit wrote; a subscriber that
// wants none of them sleeps on. The hot path's commits (claims,
// completions) name theirs, so they do not make every reactor read the log
// on every claim (ADR 033).
type Hub struct {
	mu        sync.Mutex
	subs      map[chan struct{}]func(eventType string) bool
	unblocked map[*func()]struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[chan struct{}]func(string) bool{}, unblocked: map[*func()]struct{}{}}
}

// Subscribe returns a channel that receives a value after each Wake, and a
// function that unsubscribes (call it when done).
func (h *Hub) Subscribe() (<-chan struct{}, func()) { return h.SubscribeTo(nil) }

// SubscribeTo is Subscribe for the wakes that name a type wants accepts,
// and those that name none; wants nil accepts every type.
func (h *Hub) SubscribeTo(wants func(eventType string) bool) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = wants
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// Wake signals, without blocking, every subscriber that wants one of the
// event types the commit wrote; with no types (not known, or a NOTIFY
// from another instance), every subscriber.
func (h *Hub) Wake(types ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch, wants := range h.subs {
		if wants != nil && len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return t != NoEvents && wants(t) }) {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// AnyEvent accepts every event type: its subscriber sleeps through only
// the commits that wrote no event.
func AnyEvent(string) bool { return true }

// Except accepts every event type but these.
func Except(types ...string) func(string) bool {
	return func(t string) bool { return !slices.Contains(types, t) }
}

// OnUnblocked registers fn to run on every Unblocked, and returns a function
// that unregisters it. fn runs in Unblocked's caller: it must not block.
func (h *Hub) OnUnblocked(fn func()) func() {
	h.mu.Lock()
	h.unblocked[&fn] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.unblocked, &fn)
		h.mu.Unlock()
	}
}

// Unblocked says that a commit just made tasks claimable: in this process,
// completions that made blocked tasks pending (store.Config.AfterUnblock);
// on another instance, a create whose NOTIFY says so (the listener, ADR
// 032). The claim gate lets its longest waiter claim at once, without
// reading first what a claim could find, since the commit has told it.
func (h *Hub) Unblocked() {
	h.mu.Lock()
	fns := make([]func(), 0, len(h.unblocked))
	for fn := range h.unblocked {
		fns = append(fns, *fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// The event types the hot path's commits name in their wakes.
var (
	claimedType   = events.TaskClaimed{}.EventType()
	completedType = events.TaskCompleted{}.EventType()
	unblockedType = events.TaskUnblocked{}.EventType()
	createdType   = events.TaskCreated{}.EventType()
)

func waitsForRunAt(p events.Payload) bool {
	switch c := p.(type) {
	case events.TaskCreated:
		return c.AvailableAt != nil
	case *events.TaskCreated:
		return c.AvailableAt != nil
	}
	return true // not decoded: it may
}

// NoEvents names, in a wake, a commit that wrote no event (a reactor's
// checkpoint, an outbox row): only subscribers that want every wake get it.
const NoEvents = "(no events)"

// TimedCreate names, in a wake, a create of a task that waits for a time:
// its run_at, or the end of a rate window (a create of a rate-limited type;
// where the type is not known, any create while a limited type exists). Only the due timer, which arms for those times, wants it; a
// create of tasks claimable at once does not wake it.
const TimedCreate = "(timed create)"

// wokenTypes are the event types a wake for evs names (db.wokenTypes).
func (db *DB) wokenTypes(evs []events.Envelope) []string {
	return wokenTypes(evs, db.limited.Load())
}

// wokenTypes are the event types a wake for evs names: theirs, those of
// the dependency effects written with them (queueDependencyEffects), and
// TimedCreate for a create that waits for a time; limited says that any
// create may (a limited type exists).
func wokenTypes(evs []events.Envelope, limited bool) []string {
	var types []string
	add := func(t string) {
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	for _, e := range evs {
		add(e.Type)
		switch e.Type {
		case completedType:
			add(unblockedType)
		case createdType:
			if limited || waitsForRunAt(e.Payload) {
				add(TimedCreate)
			}
		case events.TaskFailed{}.EventType(), events.TaskCancelled{}.EventType(),
			events.TaskRetrySkipped{}.EventType(), events.TaskRetriesExhausted{}.EventType():
			add(events.TaskCancelled{}.EventType())
		}
	}
	return types
}
