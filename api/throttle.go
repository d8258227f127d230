package api

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawdbot/task-service/events"
)

// LoginConfig throttles password logins (ADR 011). Zero values take the
// defaults below.
type LoginConfig struct {
	// AddressBurst attempts per client address at once, then one more
	// every AddressEvery (defaults 20 and 3 s).
	AddressBurst int
	AddressEvery time.Duration
	// AccountBurst attempts per account (email) at once, then one more every
	// AccountEvery (defaults 10 and 30 s).
	AccountBurst int
	AccountEvery time.Duration
	// LockoutAfter wrong passwords in a row lock the account for
	// LockoutBase, doubled for each lockout within a day of the last, at
	// most LockoutMax (defaults 10, 1 min, 1 h).
	LockoutAfter int
	LockoutBase  time.Duration
	LockoutMax   time.Duration
}

func (c *LoginConfig) defaults() {
	if c.AddressBurst <= 0 {
		c.AddressBurst = 20
	}
	if c.AddressEvery <= 0 {
		c.AddressEvery = 3 * time.Second
	}
	if c.AccountBurst <= 0 {
		c.AccountBurst = 10
	}
	if c.AccountEvery <= 0 {
		c.AccountEvery = 30 * time.Second
	}
	if c.LockoutAfter <= 0 {
		c.LockoutAfter = 10
	}
	if c.LockoutBase <= 0 {
		c.LockoutBase = time.Minute
	}
	if c.LockoutMax < c.LockoutBase {
		c.LockoutMax = max(time.Hour, c.LockoutBase)
	}
}

func (c LoginConfig) policy() events.LockoutPolicy {
	return events.LockoutPolicy{Base: c.LockoutBase, Max: c.LockoutMax, Memory: 24 * time.Hour}
}

// bucket is a token bucket, refilled lazily when it is used.
type bucket struct {
	tokens float64
	at     time.Time
}

// limiter holds one bucket per key. A full bucket is the same as none, so
// full ones are dropped when the map grows; past maxKeys it starts over
// (an attacker with that many addresses is beyond a per-address limit).
type limiter struct {
	burst float64
	every time.Duration
	mu    sync.Mutex
	m     map[string]*bucket
}

const maxKeys = 100_000

func newLimiter(burst int, every time.Duration) *limiter {
	return &limiter{burst: float64(burst), every: every, m: map[string]*bucket{}}
}

func (l *limiter) refill(b *bucket, now time.Time) {
	if now.After(b.at) {
		b.tokens = math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
		b.at = now
	}
}

// take spends one token of key; when none is left it spends nothing and
// says how long until one is.
func (l *limiter) take(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[key]
	if b == nil {
		if len(l.m) >= maxKeys {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.m[key] = b
	}
	l.refill(b, now)
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(l.every)), false
	}
	b.tokens--
	return 0, true
}

// refund gives back a token taken for an attempt that succeeded: only
// failures drain a bucket.
func (l *limiter) refund(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.m[key]; b != nil {
		l.refill(b, now)
		b.tokens = math.Min(l.burst, b.tokens+1)
	}
}

func (l *limiter) sweep(now time.Time) {
	for k, b := range l.m {
		if l.refill(b, now); b.tokens >= l.burst {
			delete(l.m, k)
		}
	}
	if len(l.m) >= maxKeys {
		l.m = map[string]*bucket{}
	}
}

// loginGuard decides whether a login may spend bcrypt work, and counts
// wrong passwords in a row per account to lock it out.
type loginGuard struct {
	cfg      LoginConfig
	address  *limiter
	account  *limiter
	mu       sync.Mutex
	failures map[string]int
	// unknown holds the lockouts of emails that belong to no user, so that
	// a lockout does not reveal which emails exist.
	unknown map[string]events.User

	checks    prometheus.Counter
	throttled *prometheus.CounterVec
	lockouts  prometheus.Counter
}

func newLoginGuard(cfg LoginConfig, reg prometheus.Registerer) *loginGuard {
	cfg.defaults()
	g := &loginGuard{cfg: cfg, address: newLimiter(cfg.AddressBurst, cfg.AddressEvery),
		account: newLimiter(cfg.AccountBurst, cfg.AccountEvery), failures: map[string]int{}, unknown: map[string]events.User{}}
	g.checks = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_password_checks_total",
		Help: "bcrypt password comparisons (logins and password changes)."})
	g.throttled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskservice_login_throttled_total",
		Help: "Logins refused with 429 before any password check, by reason (address, account, locked)."}, []string{"reason"})
	g.lockouts = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_login_lockouts_total",
		Help: "Accounts locked out after wrong passwords in a row."})
	reg.MustRegister(g.checks, g.throttled, g.lockouts)
	return g
}

// admit spends a token of the client's address and of the account.
func (g *loginGuard) admit(email, client string, now time.Time) error {
	if wait, ok := g.address.take(client, now); !ok {
		g.throttled.WithLabelValues("address").Inc()
		return rateLimited(wait, "too many login attempts from your address")
	}
	if wait, ok := g.account.take(email, now); !ok {
		g.throttled.WithLabelValues("account").Inc()
		return rateLimited(wait, "too many login attempts for this account")
	}
	return nil
}

// locked answers a login for a locked account (u nil: an unknown email).
func (g *loginGuard) locked(email string, u *events.User, now time.Time) error {
	if u == nil {
		g.mu.Lock()
		ghost := g.unknown[email]
		g.mu.Unlock()
		u = &ghost
	}
	if wait, locked := u.LockedAt(now); locked {
		g.throttled.WithLabelValues("locked").Inc()
		return rateLimited(wait, "this account is locked after too many wrong passwords")
	}
	return nil
}

// failed counts a wrong password; it returns the count when it reached the
// lockout threshold (and starts counting again), else 0.
func (g *loginGuard) failed(email string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.failures) >= maxKeys {
		g.failures = map[string]int{}
	}
	g.failures[email]++
	n := g.failures[email]
	if n < g.cfg.LockoutAfter {
		return 0
	}
	delete(g.failures, email)
	g.lockouts.Inc()
	return n
}

// lockUnknown locks an email that belongs to no user, the way a user would be.
func (g *loginGuard) lockUnknown(email string, failures int, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.unknown) >= maxKeys {
		g.unknown = map[string]events.User{}
	}
	ghost := g.unknown[email]
	p := ghost.LockOut(failures, "", g.cfg.policy(), now)[0].(events.UserLockedOut)
	ghost.LockedUntil, ghost.Lockouts = &p.Until, p.Level
	g.unknown[email] = ghost
}

// succeeded gives the attempt's tokens back and forgets the failures.
func (g *loginGuard) succeeded(email, client string, now time.Time) {
	g.address.refund(client, now)
	g.account.refund(email, now)
	g.mu.Lock()
	delete(g.failures, email)
	g.mu.Unlock()
}

// rateLimited is a 429 whose Retry-After (whole seconds, rounded up) the
// error handler sends.
func rateLimited(wait time.Duration, msg string) error {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &httpError{status: http.StatusTooManyRequests, retryAfter: secs,
		body: ErrorBody{Code: "rate_limited", Message: msg + "; retry after " + strconv.Itoa(secs) + " s"}}
}

// normalEmail is the account key of a login: how users store emails.
func normalEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// clientAddress is the request's client: the peer, or behind a trusted
// proxy the address it forwarded (Config.TrustedProxies).
func clientAddress(c echo.Context) string { return c.RealIP() }
