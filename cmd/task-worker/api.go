package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api/client"
)

// callTimeout bounds one API request other than a long-poll claim, so a
// hung connection turns into a retry instead of a stuck slot.
const callTimeout = 30 * time.Second

// apiClient is the typed client plus the worker's error policy: log in
// again on 401, retry what may succeed later with backoff, never retry a
// request the service rejected.
type apiClient struct {
	c               *client.Client
	email, password string
	log             zerolog.Logger

	loginMu sync.Mutex
	logins  int // successful logins, the first one included
}

func newAPIClient(cfg *Config, log zerolog.Logger) *apiClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Each slot may have a report and an update batch in flight, plus the
	// claim and the heartbeat: keep that many connections warm.
	tr.MaxIdleConnsPerHost = 2*cfg.Slots + 4
	hc := &http.Client{Transport: tr, Timeout: cfg.ClaimWait + time.Minute}
	return &apiClient{c: client.New(cfg.API, hc), email: cfg.Email, password: cfg.Password, log: log}
}

// login logs in; the first login at start uses it directly.
func (a *apiClient) login(ctx context.Context) error {
	a.loginMu.Lock()
	defer a.loginMu.Unlock()
	return a.loginLocked(ctx)
}

func (a *apiClient) loginLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.c.Login(ctx, a.email, a.password)
	if err != nil {
		return fmt.Errorf("log in as %s: %w", a.email, err)
	}
	a.logins++
	if a.logins > 1 {
		a.log.Info().Time("token_expires_at", resp.ExpiresAt).Msg("logged in again (token expired or was refused)")
	} else {
		a.log.Info().Str("worker_id", resp.User.ID).Time("token_expires_at", resp.ExpiresAt).Msg("logged in")
	}
	return nil
}

// relogin logs in again unless another goroutine already replaced the
// token that got the 401 (stale), so a burst of 401s costs one login.
func (a *apiClient) relogin(ctx context.Context, stale string) error {
	a.loginMu.Lock()
	defer a.loginMu.Unlock()
	if a.c.Token() != stale {
		return nil
	}
	return a.loginLocked(ctx)
}

// call runs fn once under a per-call timeout (0: none beyond ctx); on 401 it
// logs in again and runs fn once more.
func (a *apiClient) call(ctx context.Context, timeout time.Duration, fn func(ctx context.Context) error) error {
	attempt := func() error {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, timeout)
		}
		defer cancel()
		return fn(cctx)
	}
	tok := a.c.Token()
	err := attempt()
	if !client.IsStatus(err, http.StatusUnauthorized) {
		return err
	}
	if lerr := a.relogin(ctx, tok); lerr != nil {
		return lerr
	}
	return attempt()
}

// retry calls fn until it succeeds, fails in a way that retrying cannot
// fix, or ctx ends. Network errors, 5xx, 408, 429 and a refused re-login
// back off exponentially (1 s doubling to 5 min, with jitter).
func (a *apiClient) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	b := backoff{}
	for {
		err := a.call(ctx, callTimeout, fn)
		if err == nil || !transient(ctx, err) {
			if b.n > 0 && err == nil {
				a.log.Info().Str("call", what).Int("attempts", b.n+1).Msg("API call succeeded after retries")
			}
			return err
		}
		d := b.next()
		a.log.Warn().Err(err).Str("call", what).Str("retry_in", logDuration(d)).Msg("API call failed; will retry")
		if !sleepCtx(ctx, d) {
			return fmt.Errorf("%s: gave up: %w (last error: %w)", what, context.Cause(ctx), err)
		}
	}
}

// transient reports whether err may go away by itself.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false // the caller is done; not the service's fault
	}
	var e *client.Error
	if errors.As(err, &e) {
		switch {
		case e.Status >= 500, e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestTimeout:
			return true
		case e.Status == http.StatusUnauthorized:
			return true // the re-login was refused too: keep trying, slowly, an admin may fix the account
		}
		return false
	}
	return true // network errors, timeouts, a proxy's error page
}

// gone reports whether the service says the task is no longer this
// worker's to act on (cancelled, reassigned, already ended, deleted).
func gone(err error) bool {
	return client.IsStatus(err, http.StatusConflict) || client.IsStatus(err, http.StatusForbidden) ||
		client.IsStatus(err, http.StatusNotFound)
}

// backoff is exponential with jitter: the nth delay is uniform in
// [d/2, d] with d = 1 s × 2^n, capped at maxBackoff.
type backoff struct {
	n   int
	max time.Duration
}

func (b *backoff) next() time.Duration {
	limit := b.max
	if limit == 0 {
		limit = maxBackoff
	}
	d := time.Second << min(b.n, 20)
	if d > limit {
		d = limit
	}
	b.n++
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.n = 0 }

// sleepCtx sleeps for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// jitter is uniform in [0, j].
func jitter(j time.Duration) time.Duration {
	if j <= 0 {
		return 0
	}
	return rand.N(j + 1)
}
