package reactors_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// Latency figures (issue 3), measured through HTTP against one in-process
// instance wired like cmd/task-service (NOTIFY sender as AfterCommit,
// listener, hub, retry reactor, long-poll claims):
//
//	go test ./reactors -run '^$' -bench 'Latency' -benchtime 1000x
//
// Each iteration is one sample; p50 and p99 are reported as metrics.

type benchBundle struct {
	ctx   context.Context
	admin *client.Client
	tt    *events.TaskType
	db    *store.DB
	pool  *pgxpool.Pool
}

func benchSetup(b *testing.B) (*benchBundle, func(name string) (*client.Client, string)) {
	b.Helper()
	ctx := context.Background()
	url := storetest.NewDB(b)
	pool, err := store.Connect(ctx, url, 20)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	log := zerolog.Nop()
	hub := store.NewHub()
	n, err := store.NewNotifier(store.NotifierConfig{Querier: pool, Hub: hub, InstanceID: "bench"})
	require.NoError(b, err)
	l, err := store.NewListener(store.ListenerConfig{URL: url, Hub: hub, InstanceID: "bench"})
	require.NoError(b, err)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, AfterCommit: n.Committed})
	require.NoError(b, err)
	retry, err := reactors.NewRetry(reactors.RetryConfig{DB: db, Logger: log})
	require.NoError(b, err)
	runner, err := reactors.NewRunner(reactors.RunnerConfig{DB: db, Hub: hub, InstanceID: "bench",
		Reactors: retry.Reactors(), Logger: log})
	require.NoError(b, err)
	srv, err := api.New(api.Config{DB: db, JWTSecret: []byte("bench-secret-0123456789abcdef"), BcryptCost: bcrypt.MinCost,
		Hub: hub, Logger: log})
	require.NoError(b, err)
	ts := httptest.NewServer(srv.Handler())
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 3)
	for _, run := range []func(context.Context) error{n.Run, l.Run, runner.Run} {
		go func() { _ = run(runCtx); done <- struct{}{} }()
	}
	b.Cleanup(func() {
		srv.Drain()
		ts.Close()
		cancel()
		for range 3 {
			<-done
		}
	})

	hash, err := srv.HashPassword("admin-password")
	require.NoError(b, err)
	_, err = db.CreateUser(ctx, events.UserRegistered{Email: "admin@example.com", FullName: "Admin", IsAdmin: true},
		"admin-password", hash, events.Meta{Actor: events.System("bench")})
	require.NoError(b, err)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: time.Minute}
	admin := client.New(ts.URL, hc)
	_, err = admin.Login(ctx, "admin@example.com", "admin-password")
	require.NoError(b, err)
	retries := events.MaxRetriesLimit
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "bench", MaxRetries: &retries})
	require.NoError(b, err)
	bb := &benchBundle{ctx: ctx, admin: admin, tt: tt, db: db, pool: pool}
	worker := func(name string) (*client.Client, string) {
		u, err := admin.CreateWorker(ctx, client.NewWorker{Email: name + "@example.com", Password: "worker-password", FullName: name, MaxConcurrentTasks: 1})
		require.NoError(b, err)
		c := client.New(ts.URL, hc)
		_, err = c.Login(ctx, name+"@example.com", "worker-password")
		require.NoError(b, err)
		return c, u.ID
	}
	return bb, worker
}

func reportPercentiles(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	at := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(at(1), "max-ms")
	b.ReportMetric(0, "ns/op")
}

type claimed struct {
	task *store.TaskWithType
	err  error
	at   time.Time
}

func longPoll(ctx context.Context, w *client.Client) <-chan claimed {
	out := make(chan claimed, 1)
	go func() {
		t, err := w.ClaimWait(ctx, 30*time.Second)
		out <- claimed{t, err, time.Now()}
	}()
	return out
}

// From a worker's failed response to the retry in the hands of another,
// long-polling worker: the retry reactor's wake, batch and commit, then the
// long-poll's wake and claim.
func BenchmarkLatencyFailToRetryClaimed(b *testing.B) {
	bb, worker := benchSetup(b)
	failer, failerID := worker("failer")
	taker, _ := worker("taker")
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		task, err := bb.admin.CreateTask(bb.ctx, client.NewTask{Title: fmt.Sprint("bench ", i), TaskTypeID: bb.tt.ID, AssignedTo: failerID})
		require.NoError(b, err)
		got, err := failer.Claim(bb.ctx)
		require.NoError(b, err)
		require.Equal(b, task.ID, got.ID)
		poll := longPoll(bb.ctx, taker)
		time.Sleep(time.Millisecond) // let the long-poll start waiting
		b.StartTimer()
		_, err = failer.Fail(bb.ctx, task.ID, "bench failure")
		require.NoError(b, err)
		failedAt := time.Now()
		c := <-poll
		require.NoError(b, c.err)
		require.NotNil(b, c.task)
		require.Equal(b, task.ID, *c.task.ParentTaskID)
		samples = append(samples, c.at.Sub(failedAt))
		b.StopTimer()
		_, err = taker.Complete(bb.ctx, c.task.ID)
		require.NoError(b, err)
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}

// From an admin's create request to a long-polling worker holding the task.
func BenchmarkLatencyCreateToLongPoll(b *testing.B) {
	bb, worker := benchSetup(b)
	taker, _ := worker("taker")
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		poll := longPoll(bb.ctx, taker)
		time.Sleep(time.Millisecond) // let the long-poll start waiting
		b.StartTimer()
		start := time.Now()
		_, err := bb.admin.CreateTask(bb.ctx, client.NewTask{Title: fmt.Sprint("bench ", i), TaskTypeID: bb.tt.ID})
		require.NoError(b, err)
		c := <-poll
		require.NoError(b, c.err)
		require.NotNil(b, c.task)
		samples = append(samples, c.at.Sub(start))
		b.StopTimer()
		_, err = taker.Complete(bb.ctx, c.task.ID)
		require.NoError(b, err)
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}
