package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// batcher runs the hot path's commands (create, claim, complete) several to
// a statement: group commit done by the service (ADR 008). A call made while
// the batcher is idle runs at once, alone; calls that arrive while a batch
// is in flight wait and leave together with the next one. There is no
// timer, so a lone call never waits, and under load one statement, one
// round trip and one commit carry up to maxBatch commands. One batch is in
// flight at a time: in taskbench lanes, two or more made smaller batches that
// cost more CPU per task and were no faster.
//
// A call may have a key (the claiming worker, the completed task); calls
// with the same key never share a batch, so a batch holds at most one
// command per worker or per task, and one instance runs a worker's claims
// one at a time. A nil key func puts no such limit.
type batcher[Req, Res any] struct {
	key      func(Req) string
	run      func(ctx context.Context, reqs []Req) ([]outcome[Res], error)
	maxBatch int

	mu      sync.Mutex
	queue   []*batchCall[Req, Res]
	running bool // a goroutine is running batches
}

// outcome is one call's result.
type outcome[Res any] struct {
	res Res
	err error
}

type batchCall[Req, Res any] struct {
	req  Req
	done chan struct{}
	out  outcome[Res]
}

// batchTimeout bounds one batch; the batch does not run under any one
// caller's context, since the other calls in it do not share its deadline.
const batchTimeout = time.Minute

// newBatcher makes a batcher whose run executes a batch as one transaction
// and answers each request; an error from run fails the batch as a whole
// (see runAll). run returns errors unmapped, so runAll can tell PostgreSQL's
// from the others.
func newBatcher[Req, Res any](maxBatch int, key func(Req) string,
	run func(context.Context, []Req) ([]outcome[Res], error)) *batcher[Req, Res] {
	return &batcher[Req, Res]{key: key, run: run, maxBatch: maxBatch}
}

// do runs req in the next batch and returns its result. If ctx ends while
// req is still queued, it is dropped and never runs; once its batch has been
// taken it runs to the end and its result is returned, as a single command
// that had reached the database would commit anyway.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	out := b.doMany(ctx, []Req{req})[0]
	return out.res, out.err
}

// doMany queues reqs together, in order, and returns their results in the
// same order; they leave in as few batches as maxBatch and their keys allow.
// Cancellation works as for do, call by call.
func (b *batcher[Req, Res]) doMany(ctx context.Context, reqs []Req) []outcome[Res] {
	calls := make([]*batchCall[Req, Res], len(reqs))
	for i, r := range reqs {
		calls[i] = &batchCall[Req, Res]{req: r, done: make(chan struct{})}
	}
	b.mu.Lock()
	b.queue = append(b.queue, calls...)
	if !b.running {
		// Idle: the first batch is made of these calls only, and it runs
		// here, without a hand-off to another goroutine. Calls that arrive
		// meanwhile (or these calls beyond one batch) queue up for a
		// goroutine that carries on after.
		b.running = true
		batch := b.take()
		b.mu.Unlock()
		b.runBatch(batch)
		b.mu.Lock()
		if len(b.queue) > 0 {
			go b.loop()
		} else {
			b.running = false
		}
	}
	b.mu.Unlock()

	outs := make([]outcome[Res], len(calls))
	for i, c := range calls {
		select {
		case <-c.done:
			outs[i] = c.out
			continue
		case <-ctx.Done():
		}
		b.mu.Lock()
		taken := !b.dropQueued(c)
		b.mu.Unlock()
		if taken {
			<-c.done
			outs[i] = c.out
		} else {
			outs[i].err = ctx.Err()
		}
	}
	return outs
}

// dropQueued removes c from the queue; false when a batch already took it.
func (b *batcher[Req, Res]) dropQueued(c *batchCall[Req, Res]) bool {
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// loop runs batches until nothing it may take is left in the queue.
func (b *batcher[Req, Res]) loop() {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.runBatch(batch)
	}
}

// runBatch runs one batch and answers its calls.
func (b *batcher[Req, Res]) runBatch(batch []*batchCall[Req, Res]) {
	reqs := make([]Req, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	outs := b.runAll(ctx, reqs)
	cancel()
	for i, c := range batch {
		c.out = outs[i]
		close(c.done)
	}
}

// runAll runs reqs as one batch. If PostgreSQL failed the batch as a whole
// (a deadlock, or a value in one request it refuses), it rolled all of it
// back, and each request runs again alone, so a command that cannot succeed
// fails only itself. Any other error (the connection dropped, a result that
// would not decode) leaves unknown whether the batch committed: every call
// gets that error, since running the commands again could do them twice.
// Errors reach the callers through mapErr.
func (b *batcher[Req, Res]) runAll(ctx context.Context, reqs []Req) []outcome[Res] {
	outs, err := b.run(ctx, reqs)
	if err == nil {
		return outs
	}
	outs = make([]outcome[Res], len(reqs))
	var pgErr *pgconn.PgError
	if len(reqs) == 1 || !errors.As(err, &pgErr) {
		for i := range outs {
			outs[i].err = mapErr(err)
		}
		return outs
	}
	for i := range reqs {
		outs[i] = b.runAll(ctx, reqs[i:i+1])[0]
	}
	return outs
}

// take removes up to maxBatch calls from the queue, oldest first, skipping
// those whose key is already in the batch; under mu.
func (b *batcher[Req, Res]) take() []*batchCall[Req, Res] {
	var batch []*batchCall[Req, Res]
	keys := make(map[string]bool)
	rest := b.queue[:0]
	for _, c := range b.queue {
		if len(batch) == b.maxBatch {
			rest = append(rest, c)
			continue
		}
		if b.key != nil {
			k := b.key(c.req)
			if keys[k] {
				rest = append(rest, c)
				continue
			}
			keys[k] = true
		}
		batch = append(batch, c)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}
