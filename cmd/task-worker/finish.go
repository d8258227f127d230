package main

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/clawdbot/task-service/api/client"
)

// finisher reports the outcomes of tasks that end at about the same time
// in one request (POST /worker/tasks/completions). There is no timer: a
// report made while none is in flight goes at once, alone; reports made
// while one is in flight leave together with the next (group commit, as
// the service's own batcher does it).
type finisher struct {
	mu      sync.Mutex
	queue   []*finishCall
	sending bool
	single  bool // the service has no batched completion: report alone
}

type finishCall struct {
	item client.Finish
	done chan struct{}
	err  error
	// alone: the batched report did not settle this task (the service has
	// no such route, or refused the request as a whole): report it with
	// the single calls, which say precisely what is wrong.
	alone bool
}

// errNoBatchFinish answers every call once the service turned out to have
// no batched completion.
var errNoBatchFinish = errors.New("no batched completion")

// finish reports one outcome, together with whatever else is ready. It
// returns alone when the caller must report it with the single calls
// instead, else the item's own error (a *client.Error, or the transport
// error retries gave up on).
func (w *Worker) finish(ctx context.Context, item client.Finish) (alone bool, err error) {
	f := &w.finishes
	c := &finishCall{item: item, done: make(chan struct{})}
	f.mu.Lock()
	if f.single {
		f.mu.Unlock()
		return true, errNoBatchFinish
	}
	f.queue = append(f.queue, c)
	if f.sending {
		f.mu.Unlock()
		<-c.done // the sender answers every queued call, under its own retries
		return c.alone, c.err
	}
	f.sending = true
	for len(f.queue) > 0 {
		n := min(len(f.queue), maxClaimMany)
		batch := f.queue[:n:n]
		f.queue = f.queue[n:]
		f.mu.Unlock()
		w.sendFinishes(ctx, batch)
		f.mu.Lock()
	}
	f.sending = false
	f.mu.Unlock()
	return c.alone, c.err
}

// sendFinishes sends one request for batch, retrying what may succeed
// later, and answers each call.
func (w *Worker) sendFinishes(ctx context.Context, batch []*finishCall) {
	items := make([]client.Finish, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	var res []client.FinishResult
	err := w.api.retry(ctx, "report finished tasks", func(ctx context.Context) error {
		var err error
		res, err = w.api.c.FinishMany(ctx, items)
		return err
	})
	if err == nil && len(res) != len(batch) {
		err = &client.Error{Status: http.StatusBadGateway, Code: "bad_answer", Message: "the service answered a different number of items"}
	}
	for i, c := range batch {
		switch {
		case err == nil:
			c.err = res[i].Err()
			// A per-item 400 (a value the service refused) is settled by
			// the single calls' fallbacks (a failure with a plain reason);
			// a per-item 5xx (the database went away under that item) by
			// the single calls' retries: taken as a refusal, the task
			// stayed held until the worker gave it back, and ran again.
			c.alone = c.err != nil && (client.IsStatus(c.err, http.StatusBadRequest) || transient(ctx, c.err))
		case client.IsStatus(err, http.StatusNotFound) || client.IsStatus(err, http.StatusMethodNotAllowed):
			w.finishes.mu.Lock()
			if !w.finishes.single {
				w.log.Warn().Err(err).Msg("the service has no batched completion (POST /worker/tasks/completions); reporting one task at a time")
			}
			w.finishes.single = true
			w.finishes.mu.Unlock()
			c.err, c.alone = err, true
		case transient(ctx, err) || ctx.Err() != nil:
			c.err = err // retries gave up: the caller logs it
		default:
			// Refused as a whole (an item the service would not take, a
			// task no longer ours): nothing changed; each goes alone.
			c.err, c.alone = err, true
		}
		close(c.done)
	}
}
