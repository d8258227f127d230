package api

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Long-poll claims: POST /worker/tasks/claim?wait=<seconds> claims at once
// when it can, else holds the request until the claim gate, woken by every
// commit (here, or elsewhere through NOTIFY), says a claim could find
// something for it, and claims again, until a task comes or the wait ends.
// The database sees one read per wake, and a claim only where a task may
// wait; a slow safety re-check covers a lost wake.

// MaxClaimWait is the longest a claim may wait.
const MaxClaimWait = 60 * time.Second

// claimRecheck is the safety net between wakes (Config.ClaimRecheck).
const claimRecheck = 1500 * time.Millisecond

// drainer is the server-level signal that it is shutting down: waiting
// claimers answer null at once instead of holding Shutdown up.
type drainer struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newDrainer() *drainer {
	ctx, cancel := context.WithCancel(context.Background())
	return &drainer{ctx: ctx, cancel: cancel}
}

// Drain answers every waiting long-poll (claims: data null) and makes new
// ones answer at once. Call it before http.Server.Shutdown, which waits for
// requests in flight.
func (s *Server) Drain() { s.drain.cancel() }

// Draining is closed once Drain was called, for other long-lived handlers.
func (s *Server) Draining() <-chan struct{} { return s.drain.ctx.Done() }

// waitParam reads ?wait=, a whole number of seconds from 0 to 60.
func waitParam(c echo.Context) (time.Duration, error) {
	v := c.QueryParam("wait")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || time.Duration(n)*time.Second > MaxClaimWait {
		return 0, events.Invalid("wait", "must be a whole number of seconds from 0 to %d", int(MaxClaimWait/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// claimWaiting claims up to max tasks for the request's worker, waiting up
// to wait for at least one to become claimable; empty when none came. While
// it waits, the claim gate says when to claim again (claimgate.go).
func (s *Server) claimWaiting(c echo.Context, wait time.Duration, max int) ([]*store.TaskWithType, error) {
	ctx := c.Request().Context()
	worker, meta := claimsOf(c).Subject, actor(c, events.ActorWorker)
	if wait == 0 {
		return s.claimOnce(ctx, worker, max, meta)
	}
	// Join before the first attempt: a task created between an empty
	// attempt and joining would otherwise wake nobody.
	var turn <-chan struct{}
	var waiter *claimWaiter
	if s.gate != nil {
		waiter = s.gate.join(worker, max)
		defer s.gate.leave(waiter)
		turn = waiter.turn
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	every := claimRecheck
	if s.cfg.ClaimRecheck > 0 {
		every = s.cfg.ClaimRecheck
	}
	recheck := time.NewTicker(every)
	defer recheck.Stop()
	s.metrics.claimWaiters.Inc()
	defer s.metrics.claimWaiters.Dec()
	given := false // this attempt is a turn the gate gave
	// The first attempt is the gate's look when it said so (join).
	claim := waiter == nil || !waiter.looked
	for ; ; claim = true {
		if claim {
			tasks, err := s.claimOnce(ctx, worker, max, meta)
			if err != nil || len(tasks) > 0 {
				return tasks, err
			}
			if given {
				s.gate.missed(waiter)
			}
		}
		select {
		case <-turn:
			given = true
		case <-recheck.C:
			given = false
		case <-deadline.C:
			return nil, nil
		case <-s.drain.ctx.Done():
			return nil, nil
		case <-ctx.Done():
			return nil, nil // the client left; nobody reads the answer
		}
	}
}

func (s *Server) claimOnce(ctx context.Context, worker string, max int, meta events.Meta) ([]*store.TaskWithType, error) {
	start := time.Now()
	tasks, err := s.db.ClaimMany(ctx, worker, max, meta)
	s.metrics.claimLatency.Observe(time.Since(start).Seconds())
	if err != nil && ctx.Err() == nil && !errors.Is(err, events.ErrForbidden) {
		// The database failed the claim: the error rate operators alert on.
		s.metrics.claims.WithLabelValues("error").Inc()
	}
	return tasks, err
}
