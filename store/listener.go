package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Channel is the NOTIFY channel that says "task_events may have news".
const Channel = "task_events"

// A NOTIFY's payload is the sending instance's ID, so that it ignores its
// own; a create that carried its NOTIFY (ADR 032) adds claimableHint when
// it made a pool task claimable at once: the instances that hear it give a
// waiting long-poll its turn at once (Hub.Unblocked), without reading
// first what a claim could find. An older instance compares the whole
// payload with its ID, so it takes this for another instance's NOTIFY,
// which it is.
const claimableHint = ";claimable"

// typesTag precedes, in a NOTIFY's payload, the event types of the commits
// it announces (ADR 033), so the instances that hear it wake only the
// subscribers those types concern, as a local commit does. Without it
// (an older instance, or a commit that named none) every subscriber
// wakes. It comes before claimableHint, which an older instance looks for
// at the end.
const typesTag = ";types="

// maxPayloadTypes bounds the types a payload names (PostgreSQL takes 8,000
// bytes); past it the NOTIFY names none and wakes everyone.
const maxPayloadTypes = 2000

func notifyPayload(instanceID string, types []string, claimable bool) string {
	p := instanceID
	if t := strings.Join(types, ","); len(types) > 0 && len(t) <= maxPayloadTypes {
		p += typesTag + t
	}
	if claimable {
		p += claimableHint
	}
	return p
}

// parsePayload reads notifyPayload; types nil means every subscriber.
func parsePayload(p string) (from string, types []string, claimable bool) {
	p, claimable = strings.CutSuffix(p, claimableHint)
	if i := strings.LastIndex(p, typesTag); i >= 0 {
		types = strings.Split(p[i+len(typesTag):], ",")
		p = p[:i]
	}
	return p, types, claimable
}

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// URL of the database; the listener opens its own connection with it,
	// never through a pool or a transaction-mode pooler (DESIGN §4).
	URL string
	// Hub is woken on every notification and after every (re)connect.
	Hub *Hub
	// InstanceID: notifications whose payload equals it were sent by this
	// instance, whose hub already woke at commit; they are ignored.
	InstanceID string
	Logger     zerolog.Logger
	// MinBackoff and MaxBackoff bound the wait between reconnect attempts
	// (defaults 100 ms and 1 s: /readyz follows the listener, so a longer
	// wait keeps an instance out of its load balancer after the database is
	// back; one connect a second per instance costs the server nothing).
	MinBackoff, MaxBackoff time.Duration
	// PingEvery checks an idle connection, so a silently dead one is noticed
	// (default 30 s).
	PingEvery time.Duration
	// Registerer receives the listener's state; none when nil.
	Registerer prometheus.Registerer
}

// Listener owns the instance's one LISTEN connection. Run keeps it open:
// LISTEN, wake the hub (consumers catch up from their checkpoints), wait for
// notifications; on any error reconnect with exponential backoff and wake
// the hub again, because notifications sent while it was away are lost.
type Listener struct {
	cfg ListenerConfig

	mu        sync.Mutex
	connected bool
	lastErr   error
	received  atomic.Int64
	connects  atomic.Int64
}

// NewListener checks cfg and fills its defaults; it starts nothing.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	if cfg.URL == "" {
		return nil, errors.New("store: ListenerConfig.URL is required")
	}
	if cfg.Hub == nil {
		return nil, errors.New("store: ListenerConfig.Hub is required")
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(time.Second, cfg.MinBackoff)
	}
	if cfg.PingEvery <= 0 {
		cfg.PingEvery = 30 * time.Second
	}
	l := &Listener{cfg: cfg, lastErr: errors.New("listener not connected yet")}
	if cfg.Registerer != nil {
		up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "taskservice_listener_connected",
			Help: "1 while the instance's LISTEN connection to the primary is up, else 0.",
		}, func() float64 {
			if l.Ready() == nil {
				return 1
			}
			return 0
		})
		received := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "taskservice_listener_notifications_total",
			Help: "NOTIFYs from other instances that woke this one.",
		}, func() float64 { return float64(l.Received()) })
		connects := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "taskservice_listener_connects_total",
			Help: "LISTEN connections opened, the first included: more than one means reconnects.",
		}, func() float64 { return float64(l.connects.Load()) })
		for _, c := range []prometheus.Collector{up, received, connects} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("store: register listener metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Ready is nil while the LISTEN connection is up; /readyz reports it.
func (l *Listener) Ready() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.connected {
		return nil
	}
	return fmt.Errorf("listener down: %w", l.lastErr)
}

// Received counts the notifications that woke the hub (for tests and metrics).
func (l *Listener) Received() int64 { return l.received.Load() }

func (l *Listener) setState(connected bool, err error) {
	l.mu.Lock()
	l.connected = connected
	if err != nil {
		l.lastErr = err
	}
	l.mu.Unlock()
}

// Run keeps the connection until ctx ends; it returns nil then.
func (l *Listener) Run(ctx context.Context) error {
	backoff := l.cfg.MinBackoff
	for {
		wasUp, err := l.session(ctx)
		if ctx.Err() != nil {
			l.setState(false, errors.New("listener stopped"))
			return nil
		}
		l.setState(false, err)
		if wasUp {
			backoff = l.cfg.MinBackoff
		}
		l.cfg.Logger.Warn().Err(err).Dur("retry_in", backoff).Msg("LISTEN connection lost; reconnecting")
		select {
		case <-ctx.Done():
			l.setState(false, errors.New("listener stopped"))
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, l.cfg.MaxBackoff)
	}
}

// session is one connection's life; wasUp says whether LISTEN succeeded.
func (l *Listener) session(ctx context.Context) (wasUp bool, err error) {
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.Connect(connectCtx, l.cfg.URL)
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	l.connects.Add(1)
	l.setState(true, nil)
	l.cfg.Logger.Debug().Msg("LISTEN connection up")
	// Anything committed while no connection listened sent its NOTIFY into
	// the void: every consumer re-reads from its checkpoint.
	l.cfg.Hub.Wake()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.PingEvery)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			from, types, claimable := parsePayload(n.Payload)
			if from != "" && from == l.cfg.InstanceID {
				continue
			}
			l.received.Add(1)
			// The waiting claim first: the subscribers woken next read
			// the database too, and none of them is waited on.
			if claimable {
				l.cfg.Hub.Unblocked()
			}
			l.cfg.Hub.Wake(types...)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Quiet for a while: make sure the connection still works.
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Querier sends the NOTIFY; the pool is fine (NOTIFY outside a
	// transaction is its own short one).
	Querier Querier
	// Hub is woken at once after each local commit.
	Hub *Hub
	// InstanceID is the payload, so this instance's listener ignores it.
	InstanceID string
	// Interval spaces the NOTIFYs of a busy instance (default 50 ms): commits
	// that follow each other closely share one NOTIFY per Interval. A commit
	// after a quiet moment (no commit for Interval/10) is announced at once.
	Interval time.Duration
	Logger   zerolog.Logger
	// Registerer receives the count of NOTIFYs sent; none when nil.
	Registerer prometheus.Registerer
}

// Notifier turns local commits into wakes: this instance's hub at once,
// other instances through NOTIFY, paced by notifyPacer. A NOTIFY in every
// write transaction would serialize commits on PostgreSQL's notify queue
// lock (DESIGN §4); these are few: one per quiet moment, carried by the
// create that ends it when a create does (carry), plus one per interval,
// sent on their own.
type Notifier struct {
	cfg     NotifierConfig
	kick    chan struct{}
	sent    atomic.Int64
	carried atomic.Int64 // of sent, those a create's transaction carried

	mu    sync.Mutex
	pacer notifyPacer
	// The event types of the commits the pending NOTIFY announces;
	// untyped when one of them named none (it wakes everyone).
	types   map[string]struct{}
	untyped bool
}

// NewNotifier checks cfg and fills its defaults; it starts nothing.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	if cfg.Querier == nil {
		return nil, errors.New("store: NotifierConfig.Querier is required")
	}
	if cfg.Hub == nil {
		return nil, errors.New("store: NotifierConfig.Hub is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 50 * time.Millisecond
	}
	n := &Notifier{cfg: cfg, kick: make(chan struct{}, 1), pacer: newNotifyPacer(cfg.Interval), types: map[string]struct{}{}}
	if cfg.Registerer != nil {
		// Operators read the NOTIFY rate from it: one per quiet moment plus
		// one per interval at most.
		sent := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "taskservice_notifies_sent_total",
			Help: "NOTIFYs this instance sent to wake the other instances.",
		}, func() float64 { return float64(n.Sent()) })
		carried := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "taskservice_notifies_carried_total",
			Help: "Of taskservice_notifies_sent_total, those sent inside the transaction that created tasks, delivered at its commit.",
		}, func() float64 { return float64(n.Carried()) })
		for _, c := range []prometheus.Collector{sent, carried} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("store: register notifier metrics: %w", err)
			}
		}
	}
	return n, nil
}

// Committed is store.Config.AfterCommit: it never blocks.
func (n *Notifier) Committed(types ...string) {
	n.cfg.Hub.Wake(types...)
	n.mu.Lock()
	var sooner bool
	if len(types) == 1 && types[0] == NoEvents {
		// A commit without events (a reactor's checkpoint, an outbox row):
		// no other instance waits for it, so it neither sends a NOTIFY at
		// once nor ends a quiet moment; a create right after it still
		// carries its own (ADR 032).
		sooner = n.pacer.later(time.Now())
	} else {
		sooner = n.pacer.commit(time.Now())
	}
	n.addTypes(types)
	n.mu.Unlock()
	if !sooner {
		return // the NOTIFY already due covers it
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// addTypes records the types of a commit the pending NOTIFY announces.
// Call it with n.mu held.
func (n *Notifier) addTypes(types []string) {
	if len(types) == 0 {
		n.untyped = true
	}
	for _, t := range types {
		n.types[t] = struct{}{}
	}
}

// takeTypes returns the pending NOTIFY's types (nil: untyped), and
// forgets them when it is sent. Call it with n.mu held.
func (n *Notifier) takeTypes(forget bool) []string {
	var types []string
	if !n.untyped {
		types = make([]string, 0, len(n.types))
		for t := range n.types {
			types = append(types, t)
		}
		slices.Sort(types)
	}
	if forget {
		n.untyped = false
		clear(n.types)
	}
	return types
}

// Sent counts the NOTIFYs sent.
func (n *Notifier) Sent() int64 { return n.sent.Load() }

// Carried counts the NOTIFYs of Sent that a creating transaction carried.
func (n *Notifier) Carried() int64 { return n.carried.Load() }

// notifyStatement is the NOTIFY; a transaction that carries its own
// queues it (Notifier.carry), the sender runs it alone.
const notifyStatement = `SELECT pg_notify($1, $2)`

// carry is asked by a write about to send its last statements in a
// transaction that commits right after them (a create): true when a commit
// now would be announced at once, the leading edge. The write then queues
// notifyStatement with them, so PostgreSQL delivers the NOTIFY at its
// commit: no goroutine to wake, no connection to take, no statement and
// commit of its own after it (ADR 032). It must then call carriedCommit
// after the commit instead of Committed; if the transaction fails, nothing
// (nothing committed, nothing to announce). at is the time to give it.
// The payload names types, the write's own event types, and those of the
// commits still pending, which it may cover (carried).
func (n *Notifier) carry(types []string, claimable bool) (at time.Time, payload string, ok bool) {
	at = time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.pacer.carry(at) {
		return at, "", false
	}
	if !n.pacer.pending {
		return at, notifyPayload(n.cfg.InstanceID, types, claimable), true
	}
	pending := n.takeTypes(false)
	if pending != nil && len(types) > 0 {
		pending = append(pending, types...)
	}
	return at, notifyPayload(n.cfg.InstanceID, pending, claimable), true
}

// carriedCommit is Committed for a commit that carried its NOTIFY (carry
// said ok at at); types are what it wrote, for this instance's hub.
func (n *Notifier) carriedCommit(at time.Time, types ...string) {
	n.cfg.Hub.Wake(types...)
	n.mu.Lock()
	if n.pacer.carried(at, time.Now()) {
		n.takeTypes(true)
	}
	n.mu.Unlock()
	n.sent.Add(1)
	n.carried.Add(1)
}

// Run sends NOTIFYs until ctx ends, then one last one if commits are pending,
// so other instances hear about this instance's final writes.
func (n *Notifier) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		n.mu.Lock()
		pending, due, now := n.pacer.pending, n.pacer.due, time.Now()
		sendNow := pending && !now.Before(due)
		var types []string
		if sendNow {
			// Recorded before the NOTIFY: a commit from here on needs the next.
			n.pacer.sending(now)
			types = n.takeTypes(true)
		}
		n.mu.Unlock()
		if sendNow {
			n.send(ctx, types)
			continue
		}
		if pending {
			timer.Reset(due.Sub(now))
		}
		select {
		case <-ctx.Done():
			n.mu.Lock()
			last := n.pacer.pending
			types := n.takeTypes(true)
			n.mu.Unlock()
			if last {
				n.send(context.WithoutCancel(ctx), types)
			}
			return nil
		case <-n.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// notifyPacer decides when a NOTIFY goes out (DESIGN §4). A commit after a
// quiet moment (no commit for quiet) is announced at once; a commit close
// behind another waits for the next NOTIFY, at most one per interval after
// the last. So sporadic commits wake other instances in milliseconds, and a
// busy instance sends about one NOTIFY per interval: never more than one
// per quiet plus one per interval, however the commits fall.
type notifyPacer struct {
	interval, quiet time.Duration
	lastCommit      time.Time
	lastSent        time.Time
	pending         bool      // commits not yet announced
	due             time.Time // when they are, while pending
	lastPending     time.Time // the last commit recorded as pending
}

func newNotifyPacer(interval time.Duration) notifyPacer {
	return notifyPacer{interval: interval, quiet: interval / 10}
}

// commit records a commit at now; true when its NOTIFY is due sooner than
// the one already pending (or none was).
func (p *notifyPacer) commit(now time.Time) (sooner bool) {
	quiet := p.lastCommit.IsZero() || now.Sub(p.lastCommit) >= p.quiet
	p.lastCommit = now
	due := p.due
	switch {
	case quiet:
		due = now
	case !p.pending:
		due = p.lastSent.Add(p.interval)
		if due.Before(now) {
			due = now
		}
	}
	sooner = !p.pending || due.Before(p.due)
	p.due, p.pending, p.lastPending = due, true, now
	return sooner
}

// later records a commit that other instances need not hear of at once:
// the next NOTIFY announces it, an interval from now at the latest. It
// sends none at once and is not a commit that ends a quiet moment, so the
// next commit that needs a NOTIFY at once still gets one. true when its
// NOTIFY is due sooner than the one already pending (or none was).
func (p *notifyPacer) later(now time.Time) (sooner bool) {
	due := now.Add(p.interval)
	sooner = !p.pending || due.Before(p.due)
	if sooner {
		p.due = due
	}
	p.pending, p.lastPending = true, now
	return sooner
}

// carry is commit for a transaction that could carry its own NOTIFY,
// asked before it commits: true when a commit at now would be announced at
// once. The transaction then counts as a commit at now, so no other write
// in the next quiet carries one too, and as a NOTIFY sent at now, so a
// commit that lands before it is done waits for the interval instead of
// going at once beside it (one NOTIFY per quiet moment plus one per
// interval, as before); false leaves everything as it was.
func (p *notifyPacer) carry(now time.Time) bool {
	if !p.lastCommit.IsZero() && now.Sub(p.lastCommit) < p.quiet {
		return false
	}
	p.lastCommit = now
	if now.After(p.lastSent) {
		p.lastSent = now
	}
	return true
}

// carried records that the transaction carry let at at committed at now,
// its NOTIFY with it. That NOTIFY covers every commit recorded before at
// (they committed before it did): a NOTIFY pending only for them is not
// needed any more; covered says so. Commits recorded since may have
// committed after it and keep theirs.
func (p *notifyPacer) carried(at, now time.Time) (covered bool) {
	if now.After(p.lastCommit) {
		p.lastCommit = now
	}
	if now.After(p.lastSent) {
		p.lastSent = now
	}
	if p.pending && p.lastPending.Before(at) {
		p.pending = false
		return true
	}
	return false
}

// sending records that a NOTIFY for every commit so far goes out at now.
func (p *notifyPacer) sending(now time.Time) {
	p.lastSent, p.pending = now, false
}

func (n *Notifier) send(ctx context.Context, types []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := n.cfg.Querier.Exec(ctx, notifyStatement, Channel, notifyPayload(n.cfg.InstanceID, types, false)); err != nil {
		// A lost NOTIFY costs other instances latency (their catch-up ticker
		// still runs), never data.
		n.cfg.Logger.Warn().Err(err).Msg("NOTIFY failed")
		return
	}
	n.sent.Add(1)
}
