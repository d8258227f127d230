package api

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// authUsers answers "who is this token's user now" for every authenticated
// request without a database read per request (ADR 011). It caches users
// and follows the log's auth events (events.AuthEventTypes) from any
// instance, woken by the hub that the listener wakes on every NOTIFY, with a
// short ticker as the safety net. A cached user is used only while it is at
// least as new as every auth event seen for it. Until the follower runs (and
// after it stops), every lookup reads the database.
type authUsers struct {
	db   *store.DB
	hub  *store.Hub
	poll time.Duration

	following atomic.Bool
	mu        sync.RWMutex
	users     map[string]*events.User
	seen      map[string]int // the highest auth event version seen per user
	// watchers are the open event streams of each user, told of its
	// every change so that they re-check their login (see watch).
	watchers map[string]map[chan struct{}]struct{}

	reads, rewinds prometheus.Counter
}

// authPoll bounds how long a revocation takes to reach this instance when
// no wake comes (a lost NOTIFY): well within the second the issue allows.
const authPoll = 500 * time.Millisecond

func newAuthUsers(db *store.DB, hub *store.Hub, reg prometheus.Registerer) *authUsers {
	a := &authUsers{db: db, hub: hub, poll: authPoll, users: map[string]*events.User{}, seen: map[string]int{},
		watchers: map[string]map[chan struct{}]struct{}{}}
	a.reads = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_auth_user_reads_total",
		Help: "Users read from the database to authenticate a request (cache misses)."})
	a.rewinds = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_auth_log_rewinds_total",
		Help: "Times the user cache was dropped because the database was behind its position in the log (a failover to a lagging standby)."})
	reg.MustRegister(a.reads, a.rewinds)
	return a
}

// user returns the current state of user id.
func (a *authUsers) user(ctx context.Context, id string) (*events.User, error) {
	following := a.following.Load()
	if following {
		a.mu.RLock()
		u, min := a.users[id], a.seen[id]
		a.mu.RUnlock()
		if u != nil && u.Version >= min {
			return u, nil
		}
	}
	return a.read(ctx, id)
}

// fresh reads user id from the database, for a token newer than the cached
// user (issued on another instance after a change this one has not heard
// of yet): only a token signed after the change can ask for this read.
func (a *authUsers) fresh(ctx context.Context, id string) (*events.User, error) {
	return a.read(ctx, id)
}

func (a *authUsers) read(ctx context.Context, id string) (*events.User, error) {
	following := a.following.Load()
	a.reads.Inc()
	u, err := a.db.GetUser(ctx, id)
	if err != nil {
		return nil, err
	}
	if following {
		a.mu.Lock()
		if u.Version >= a.seen[id] {
			a.users[id] = u
		}
		a.mu.Unlock()
	}
	return u, nil
}

// saw records that user id is at version or later, so older cached state is
// read again. Handlers call it after their own commands; the follower after
// everyone's.
func (a *authUsers) saw(id string, version int) {
	a.mu.Lock()
	if version > a.seen[id] {
		a.seen[id] = version
		for ch := range a.watchers[id] {
			select {
			case ch <- struct{}{}:
			default: // a change is already waiting to be checked
			}
		}
	}
	a.mu.Unlock()
}

// forget drops everything learnt from a log that the database no longer
// has (ErrLogRewound): the versions seen may be handed out again, so they
// would hide the new changes. Open streams re-check their logins.
func (a *authUsers) forget() {
	a.rewinds.Inc()
	a.mu.Lock()
	a.users, a.seen = map[string]*events.User{}, map[string]int{}
	for _, chans := range a.watchers {
		for ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	a.mu.Unlock()
}

// watch returns a channel that hears of every later change to user id
// (from this instance's commands or, through the follower, any
// instance's), and the func that stops watching. An open event stream
// re-checks its login on it, so a revocation ends the stream as soon as
// it would refuse a request.
func (a *authUsers) watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	if a.watchers[id] == nil {
		a.watchers[id] = map[chan struct{}]struct{}{}
	}
	a.watchers[id][ch] = struct{}{}
	a.mu.Unlock()
	return ch, func() {
		a.mu.Lock()
		delete(a.watchers[id], ch)
		if len(a.watchers[id]) == 0 {
			delete(a.watchers, id)
		}
		a.mu.Unlock()
	}
}

// run follows the auth events until ctx ends.
func (a *authUsers) run(ctx context.Context) {
	defer func() {
		a.following.Store(false)
		a.mu.Lock()
		a.users = map[string]*events.User{}
		a.mu.Unlock()
	}()
	var wake <-chan struct{}
	if a.hub != nil {
		w, unsubscribe := a.hub.SubscribeTo(func(t string) bool { return slices.Contains(events.AuthEventTypes, t) })
		defer unsubscribe()
		wake = w
	}
	tick := time.NewTicker(a.poll)
	defer tick.Stop()
	var pos events.Position
	started := false
	for {
		if !started {
			p, err := a.db.AuthChangesStart(ctx)
			if err == nil {
				pos, started = p, true
				a.following.Store(true)
			}
		} else if err := a.follow(ctx, &pos); err != nil {
			// The database is away, or is another server that is behind
			// (a failover): cached users may miss a revocation, so stop
			// trusting them until the follower has caught up again.
			a.following.Store(false)
			a.mu.Lock()
			a.users = map[string]*events.User{}
			a.mu.Unlock()
			if errors.Is(err, store.ErrLogRewound) {
				a.forget()
				started = false
			}
		} else {
			a.following.Store(true)
		}
		// Every commit wakes the hub; one read per authSpacing is plenty.
		select {
		case <-ctx.Done():
			return
		case <-time.After(authSpacing):
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
	}
}

// authSpacing is the least time between two reads of the auth events.
const authSpacing = 20 * time.Millisecond

// follow reads every auth event after pos.
func (a *authUsers) follow(ctx context.Context, pos *events.Position) error {
	const page = 500
	for {
		changes, next, err := a.db.AuthChanges(ctx, *pos, page)
		if err != nil {
			return err
		}
		for _, c := range changes {
			a.saw(c.UserID, c.Version)
		}
		moved := next != *pos
		*pos = next
		if len(changes) < page || !moved {
			return nil
		}
	}
}
