package store

import "sync"

// Hub fans wake-ups out to everything in this process that waits for new
// events: reactors, long-polling claimers, SSE tails. A wake is a hint that
// the table may have news, never the news itself; subscribers re-read.
// Wakes coalesce: a subscriber that has not consumed the last wake gets no
// second one, so a slow subscriber never blocks Wake.
type Hub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{subs: map[chan struct{}]struct{}{}} }

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
