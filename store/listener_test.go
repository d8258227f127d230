package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// run runs fn until the test ends and waits for it.
func run(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = fn(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitWake fails the test unless ch receives within d.
func waitWake(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("no wake: %s", what)
	}
}

func drainWakes(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func listenerPID(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&pid)
		if err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no LISTEN connection: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestListener(t *testing.T) {
	t.Parallel()
	url := storetest.NewDB(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)

	hub := store.NewHub()
	wake, unsubscribe := hub.Subscribe()
	defer unsubscribe()
	l, err := store.NewListener(store.ListenerConfig{URL: url, Hub: hub, InstanceID: "me", Logger: log,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, l.Ready(), "not ready before it connects")
	run(t, l.Run)

	waitWake(t, wake, 30*time.Second, "after connecting, consumers catch up")
	require.NoError(t, l.Ready())

	// Another instance's NOTIFY wakes the hub; our own is ignored.
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'me')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other')`)
	require.NoError(t, err)
	waitWake(t, wake, 30*time.Second, "a NOTIFY from another instance")
	require.Equal(t, int64(1), l.Received(), "our own NOTIFY was ignored")

	// The connection dies: the listener reconnects, wakes the hub (what was
	// sent meanwhile is lost) and hears NOTIFYs again.
	drainWakes(wake)
	pid := listenerPID(t, pool)
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	waitWake(t, wake, 30*time.Second, "after reconnecting")
	require.Eventually(t, func() bool { return l.Ready() == nil }, 30*time.Second, 10*time.Millisecond)
	require.NotEqual(t, pid, listenerPID(t, pool), "a new connection")
	drainWakes(wake)
	_, err = pool.Exec(ctx, `SELECT pg_notify('task_events', 'other')`)
	require.NoError(t, err)
	waitWake(t, wake, 30*time.Second, "a NOTIFY after the reconnect")
}

func TestNotifierCoalesces(t *testing.T) {
	t.Parallel()
	url := storetest.NewDB(t)
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Another instance listens.
	otherHub := store.NewHub()
	otherWake, unsubscribe := otherHub.Subscribe()
	defer unsubscribe()
	l, err := store.NewListener(store.ListenerConfig{URL: url, Hub: otherHub, InstanceID: "other"})
	require.NoError(t, err)
	run(t, l.Run)
	waitWake(t, otherWake, 30*time.Second, "listener connected")

	hub := store.NewHub()
	wake, unsub := hub.Subscribe()
	defer unsub()
	n, err := store.NewNotifier(store.NotifierConfig{Querier: pool, Hub: hub, InstanceID: "me", Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	run(t, n.Run)

	// One commit: the local hub wakes at once, the other instance soon.
	n.Committed()
	waitWake(t, wake, time.Second, "local wake at commit")
	waitWake(t, otherWake, 30*time.Second, "the other instance")

	// A storm of commits costs at most one NOTIFY per interval, and one for
	// each quiet moment (5 ms without a commit) a loaded machine puts in it
	// (TestNotifyPacer has the rule without a clock).
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	before := n.Sent()
	quiet, last := 0, start
	for time.Since(start) < 300*time.Millisecond {
		if now := time.Now(); now.Sub(last) >= 2*time.Millisecond {
			quiet++
		}
		n.Committed()
		last = time.Now()
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(start)
	require.Eventually(t, func() bool { return n.Sent() > before }, 30*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // let the trailing NOTIFY go
	sent := n.Sent() - before
	require.LessOrEqual(t, sent, int64(elapsed/(50*time.Millisecond))+2+int64(quiet), "at most one NOTIFY per interval")
	require.GreaterOrEqual(t, sent, int64(1))
}
