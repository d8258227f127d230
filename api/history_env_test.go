package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// histEnv is a server with a running live tail on a fresh database, for the
// history, events and tail tests.
type histEnv struct {
	t        *testing.T
	ctx      context.Context
	srv      *api.Server
	db       *store.DB
	pool     *pgxpool.Pool
	hub      *store.Hub
	url      string
	admin    *client.Client
	adminID  string
	hc       *http.Client
	reg      *prometheus.Registry
	offset   atomic.Int64 // added to the API's clock (token expiry tests)
	stopTail func()
	taskType *events.TaskType
}

func newHistEnv(t *testing.T, tail api.TailConfig) *histEnv {
	t.Helper()
	return newHistEnvSockets(t, tail, 0)
}

// smallSockets caps the send buffer of every connection the server accepts,
// so that a client that stops reading blocks the server's writes quickly.
type smallSockets struct {
	net.Listener
	size int
}

func (l smallSockets) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(l.size)
	}
	return c, err
}

// newHistEnvSockets is newHistEnv with the server's socket send buffers
// capped at sendBuffer bytes (0: the system's).
func newHistEnvSockets(t *testing.T, tail api.TailConfig, sendBuffer int) *histEnv {
	t.Helper()
	e := &histEnv{t: t, ctx: context.Background(), pool: storetest.NewPool(t), hub: store.NewHub(), reg: prometheus.NewRegistry()}
	db, err := store.New(e.pool, store.Config{Projector: projections.Projector{}, AfterCommit: e.hub.Wake})
	require.NoError(t, err)
	e.db = db
	e.srv, err = api.New(api.Config{
		DB: db, JWTSecret: []byte("history-secret-0123456789"), BcryptCost: bcrypt.MinCost, Registry: e.reg,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Hub: e.hub, Tail: tail,
		Now: func() time.Time { return time.Now().Add(time.Duration(e.offset.Load())) },
	})
	require.NoError(t, err)
	_, handler := checked(t, e.srv)
	ts := httptest.NewUnstartedServer(handler)
	if sendBuffer > 0 {
		ts.Listener = smallSockets{Listener: ts.Listener, size: sendBuffer}
	}
	ts.Start()
	t.Cleanup(ts.Close) // runs after the tail stopped: no stream holds it up
	e.url = ts.URL

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.srv.Run(ctx); err != nil {
			t.Errorf("tail: %v", err)
		}
	}()
	var once sync.Once
	e.stopTail = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(e.stopTail)

	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	e.hc = &http.Client{Transport: tr, Timeout: 60 * time.Second}

	hash, err := e.srv.HashPassword("admin-password")
	require.NoError(t, err)
	u, err := db.CreateUser(e.ctx, events.UserRegistered{Email: "ada@example.com", FullName: "Ada Admin", IsAdmin: true},
		"admin-password", hash, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	e.adminID = u.ID
	e.admin = client.New(ts.URL, e.hc)
	_, err = e.admin.Login(e.ctx, "ada@example.com", "admin-password")
	require.NoError(t, err)
	e.taskType, err = e.admin.CreateTaskType(e.ctx, client.NewTaskType{Name: "crawl", Label: "Crawl"})
	require.NoError(t, err)
	e.waitTailRunning()
	return e
}

// waitTailRunning waits until the broadcaster read the log head and serves.
func (e *histEnv) waitTailRunning() {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		resp, err := e.rawStream(e.ctx, "", nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
}

// histWorker is a logged-in worker.
type histWorker struct {
	*client.Client
	ID   string
	Name string
}

func (e *histEnv) worker(name string, limit int) *histWorker {
	e.t.Helper()
	email := strings.ToLower(name) + "@workers.example.com"
	u, err := e.admin.CreateWorker(e.ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: name, MaxConcurrentTasks: limit})
	require.NoError(e.t, err)
	c := client.New(e.url, e.hc)
	_, err = c.Login(e.ctx, email, "worker-password")
	require.NoError(e.t, err)
	return &histWorker{Client: c, ID: u.ID, Name: name}
}

// horizonWait bounds waits on the consumer horizon. Generous: on a shared
// server another database's long transaction (a replay benchmark, say)
// holds every consumer back until it ends.
const horizonWait = 2 * time.Minute

// allEvents is the whole log in consumer order, read straight from the
// table once every committed event is visible to consumers. Call it when no
// writer runs. (The horizon is cluster-wide: a transaction in any database
// of the server, such as another test cloning its database, holds it back.)
func (e *histEnv) allEvents() []events.Envelope {
	e.t.Helper()
	var committed int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events`).Scan(&committed))
	var evs []events.Envelope
	deadline := time.Now().Add(horizonWait)
	for {
		var err error
		evs, err = e.db.ReadLog(e.ctx, e.pool, events.Position{}, 1<<30, store.LogFilter{})
		require.NoError(e.t, err)
		if len(evs) == committed {
			return evs
		}
		if time.Now().After(deadline) {
			var snap, maxTx string
			var hidden int
			_ = e.pool.QueryRow(e.ctx, `SELECT pg_current_snapshot()::text, (SELECT max(tx_id)::text FROM task_events),
				(SELECT count(*) FROM task_events WHERE tx_id >= pg_snapshot_xmin(pg_current_snapshot()))`).Scan(&snap, &maxTx, &hidden)
			e.t.Fatalf("the consumer horizon did not pass every committed event in %s: %d committed, %d visible; snapshot %s, max tx_id %s, %d rows at or above xmin",
				horizonWait, committed, len(evs), snap, maxTx, hidden)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// matches is the documented meaning of the events filters, in the test's
// own words.
func matchesFilter(ev events.Envelope, types []string, streamID, workerID string) bool {
	if len(types) > 0 {
		found := false
		for _, t := range types {
			found = found || t == ev.Type
		}
		if !found {
			return false
		}
	}
	if streamID != "" && ev.StreamID != streamID {
		return false
	}
	if workerID != "" {
		var d struct {
			WorkerID string `json:"worker_id"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if d.WorkerID != workerID && ev.Meta.Actor.ID != workerID && ev.StreamID != workerID {
			return false
		}
	}
	return true
}

// workload appends a realistic mix of events through the store until ctx
// ends or n loops ran (n <= 0: no limit): create, claim, updates, release
// now and then, complete or fail or cancel. It returns how many events it
// appended. ctx only says when to stop: a command in flight finishes, so
// nothing commits after workload returns.
func (e *histEnv) workload(stop context.Context, workers []*histWorker, seed uint64, n int, descLen int) (int, error) {
	ctx := context.WithoutCancel(stop)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	appended := 0
	adminMeta := events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: e.adminID}}
	desc := strings.Repeat("d", descLen)
	for i := 0; n <= 0 || i < n; i++ {
		if stop.Err() != nil {
			return appended, nil
		}
		w := workers[rng.IntN(len(workers))]
		wMeta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
		t, err := e.db.CreateTask(ctx, e.pool, store.NewTaskParams{TaskTypeID: e.taskType.ID, NewTaskParams: events.NewTaskParams{
			Title: fmt.Sprintf("task %d-%d", seed, i), Description: desc, CreatedBy: e.adminID, AssignedTo: w.ID,
		}}, adminMeta)
		if err != nil {
			return appended, err
		}
		appended += 2 // created + assigned
		cmd := func(decide store.TaskDecision) error {
			_, evs, err := e.db.UpdateTask(ctx, e.pool, t.ID, wMeta, decide)
			appended += len(evs)
			return err
		}
		steps := []store.TaskDecision{func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) }}
		if rng.IntN(5) == 0 {
			steps = append(steps,
				func(t *events.Task) ([]events.Payload, error) { return t.Release(w.ID, "blocked") },
				func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) })
		}
		for u := rng.IntN(3); u > 0; u-- {
			steps = append(steps, func(t *events.Task) ([]events.Payload, error) {
				return t.PostUpdate(fmt.Sprintf("0190c6e2-9bd4-7c8a-b6a1-%012d", rng.Int64N(1e12)), w.ID, "working", true)
			})
		}
		switch rng.IntN(4) {
		case 0:
			steps = append(steps, func(t *events.Task) ([]events.Payload, error) {
				return t.Fail(w.ID, events.FailureError, "it broke", nil)
			})
		case 1:
			steps = append(steps, func(t *events.Task) ([]events.Payload, error) { return t.Cancel(e.adminID, "not needed") })
		default:
			steps = append(steps,
				func(t *events.Task) ([]events.Payload, error) {
					return t.PostResult(w.ID, json.RawMessage(`{"ok":true}`))
				},
				func(t *events.Task) ([]events.Payload, error) { return t.Complete(w.ID) })
		}
		for _, step := range steps {
			if stop.Err() != nil {
				return appended, nil
			}
			if err := cmd(step); err != nil {
				return appended, err
			}
		}
	}
	return appended, nil
}

// metric reads one counter or gauge of the server.
func (e *histEnv) metric(name string) float64 {
	e.t.Helper()
	return metricSum(e.t, e.reg, name)
}

// rawStream opens the stream with a plain request, for tests that look at
// the bytes (heartbeats, errors) or must stop reading.
func (e *histEnv) rawStream(ctx context.Context, query string, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/v1/admin/events/stream"+query, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if _, ok := header["Authorization"]; !ok {
		req.Header.Set("Authorization", "Bearer "+e.admin.Token())
	}
	return (&http.Client{Transport: e.hc.Transport}).Do(req)
}

// sseFrame is one parsed frame of a raw stream.
type sseFrame struct {
	id, event, data string
	comment         string
}

// readFrames parses frames from r until EOF or an error, sending each.
func readFrames(r io.Reader, out chan<- sseFrame) error {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var f sseFrame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			out <- f
			f = sseFrame{}
		case strings.HasPrefix(line, ":"):
			f.comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = line[6:]
		}
	}
	return sc.Err()
}

// inTx is a helper for store calls that want a transaction.
func (e *histEnv) inTx(fn func(tx pgx.Tx) error) {
	e.t.Helper()
	require.NoError(e.t, e.db.WithTx(e.ctx, fn))
}
