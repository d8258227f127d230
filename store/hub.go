package store

import "sync"

// Hub fans wake-ups out to everything in this process that waits for new
// events: reactors, long-polling claimers, SSE tails. A wake is a hint that
// the table may have news, never the news itself; subscribers re-read.
// Wakes coalesce: a subscriber that has not consumed the last wake gets no
// second one, so a slow subscriber never blocks Wake.
type Hub struct {
	mu        sync.Mutex
	subs      map[chan struct{}]struct{}
	unblocked map[*func()]struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[chan struct{}]struct{}{}, unblocked: map[*func()]struct{}{}}
}

// Subscribe returns a channel that receives a value after each Wake, and a
// function that unsubscribes (call it when done).
func (h *Hub) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// Wake signals every subscriber without blocking.
func (h *Hub) Wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
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
