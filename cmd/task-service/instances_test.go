package main_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// Many instances of the real binary on one database (issue 3): reactors and
// the stuck detector must do every piece of work exactly once however the
// instances share it, and an instance killed with SIGKILL loses nothing.

// instance is one task-service process that can be killed and restarted.
type instance struct {
	t    *testing.T
	name string
	env  []string
	addr string
	base string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
	logs *syncBuffer
	// stopped: the test stopped this run on purpose, so its exit before
	// it was ready (a restart the test did not wait for) is no failure.
	stopped bool
}

// startInstances starts n instances on dbURL with extra environment.
func startInstances(t *testing.T, dbURL string, n int, extra ...string) []*instance {
	t.Helper()
	out := make([]*instance, n)
	var wg sync.WaitGroup
	for i := range n {
		addr := freeAddr(t)
		env := baseEnv(append([]string{
			"DATABASE_URL=" + dbURL, "LISTEN_ADDR=" + addr, "JWT_SECRET=e2e-secret-0123456789abcdef",
			"ADMIN_EMAIL=root@example.com", "ADMIN_PASSWORD=root-password", "BCRYPT_COST=4", "LOG_LEVEL=warn",
			"TELEGRAM_ENABLED=false", "REACTOR_CATCH_UP=1s",
		}, extra...)...)
		out[i] = &instance{t: t, name: fmt.Sprintf("instance-%d", i), env: env, addr: addr, base: "http://" + addr}
		wg.Go(func() { out[i].start() })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, in := range out {
			in.stop(syscall.SIGKILL)
			if t.Failed() {
				in.mu.Lock()
				logs := in.logs
				in.mu.Unlock()
				t.Logf("%s output (tail):\n%s", in.name, tail(logs.String(), 4000))
			}
		}
	})
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// start runs the process and waits for /readyz (database and listener up).
func (in *instance) start() {
	t := in.t
	in.mu.Lock()
	logs := &syncBuffer{}
	in.logs = logs
	in.stopped = false
	in.cmd = exec.Command(binary)
	in.cmd.Env = in.env
	in.cmd.Stdout, in.cmd.Stderr = logs, logs
	if err := in.cmd.Start(); err != nil {
		in.mu.Unlock()
		t.Errorf("start %s: %v", in.name, err)
		return
	}
	done := make(chan error, 1)
	in.done = done
	cmd := in.cmd
	in.mu.Unlock()
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			in.mu.Lock()
			stopped := in.stopped
			in.mu.Unlock()
			if stopped {
				return
			}
			t.Errorf("%s exited before it was ready: %v\n%s", in.name, err, logs.String())
			return
		default:
		}
		resp, err := http.Get(in.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("%s not ready after 60 s (last: %v)\n%s", in.name, err, logs.String())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits for the process to exit.
func (in *instance) stop(sig syscall.Signal) {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.stopped = true
	in.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	err := <-done
	done <- err
}

// cluster is what a test drives: the instances, an admin, the database.
type cluster struct {
	t     *testing.T
	ctx   context.Context
	ins   []*instance
	admin *client.Client
	pool  *pgxpool.Pool
	hc    *http.Client
}

func newCluster(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	ins := startInstances(t, dbURL, n, extra...)
	require.False(t, t.Failed())
	hc := checkedHTTP(t, ins[0].base, &http.Transport{MaxIdleConnsPerHost: 64})
	admin := client.New(ins[0].base, hc)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &cluster{t: t, ctx: ctx, ins: ins, admin: admin, pool: pool, hc: hc}
}

// worker is a worker with one client per instance (same token): a request
// to a dead instance is sent to the next one.
type clusterWorker struct {
	id      string
	clients []*client.Client
}

func (c *cluster) worker(name string, limit int) *clusterWorker {
	c.t.Helper()
	email := name + "@workers.example.com"
	u, err := c.admin.CreateWorker(c.ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: name, MaxConcurrentTasks: limit})
	require.NoError(c.t, err)
	login := client.New(c.ins[0].base, c.hc)
	_, err = login.Login(c.ctx, email, "worker-password")
	require.NoError(c.t, err)
	w := &clusterWorker{id: u.ID}
	for _, in := range c.ins {
		cl := client.New(in.base, c.hc)
		cl.SetToken(login.Token())
		w.clients = append(w.clients, cl)
	}
	return w
}

// do runs op through instance `first`, failing over to the others while an
// instance does not answer at all (killed). An API error is an answer.
func (w *clusterWorker) do(first int, op func(*client.Client) error) error {
	var err error
	for i := range 3 * len(w.clients) {
		err = op(w.clients[(first+i)%len(w.clients)])
		var apiErr *client.Error
		if err == nil || errors.As(err, &apiErr) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func (c *cluster) count(sql string, args ...any) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.pool.QueryRow(c.ctx, sql, args...).Scan(&n))
	return n
}

// eventually polls cond for up to 90 s (consumers wait for the cluster-wide
// xid horizon, which any long transaction on the test server holds back).
func (c *cluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failBurst has workers claim and fail their assigned tasks through every
// instance; kill, when set, runs once half the failures are in.
func (c *cluster) failBurst(tt *events.TaskType, workers, perWorker int, kill func()) []string {
	c.t.Helper()
	var ws []*clusterWorker
	for i := range workers {
		ws = append(ws, c.worker(fmt.Sprintf("burst%d", i), perWorker))
	}
	// Task i goes to worker i%workers. Each worker's tasks are created in
	// order, one transaction each, so its claims come in that order (a
	// worker's assigned tasks oldest first); the workers' creations run
	// side by side, as setup that is not what the test is about.
	ids := make([]string, workers*perWorker)
	mine := make([][]string, workers)
	var created sync.WaitGroup
	for w := range workers {
		created.Go(func() {
			for i := w; i < len(ids); i += workers {
				task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: fmt.Sprintf("Burst task %d", i), TaskTypeID: tt.ID,
					AssignedTo: ws[w].id})
				if !assert.NoError(c.t, err) {
					return
				}
				ids[i] = task.ID
				mine[w] = append(mine[w], task.ID)
			}
		})
	}
	created.Wait()
	require.False(c.t, c.t.Failed())
	var once sync.Once
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for wi, w := range ws {
		wg.Go(func() {
			for i, id := range mine[wi] {
				via := (wi + i) % len(c.ins)
				c.claimAndFail(w, via, id)
				mu.Lock()
				done++
				half := done == workers*perWorker/2
				mu.Unlock()
				if half && kill != nil {
					once.Do(kill)
				}
			}
		})
	}
	wg.Wait()
	return ids
}

// claimAndFail claims w's next assigned task (id, unless a claim whose
// answer a crash swallowed took it already) and fails id, through instance
// via or, when it is down, the next one.
func (c *cluster) claimAndFail(w *clusterWorker, via int, id string) {
	c.t.Helper()
	claim := func() {
		require.NoError(c.t, w.do(via, func(cl *client.Client) error {
			_, err := cl.Claim(c.ctx)
			return err
		}))
	}
	claim()
	for attempt := 0; ; attempt++ {
		require.Less(c.t, attempt, 10, "fail %s", id)
		err := w.do(via+1, func(cl *client.Client) error {
			_, err := cl.Fail(c.ctx, id, "burst failure")
			return err
		})
		if err == nil {
			return
		}
		require.True(c.t, client.IsStatus(err, http.StatusConflict), "fail %s: %v", id, err)
		var status string
		require.NoError(c.t, c.pool.QueryRow(c.ctx, `SELECT status FROM worker_tasks WHERE id = $1`, id).Scan(&status))
		if status == string(events.StatusFailed) {
			return // failed before: the answer was lost in a crash
		}
		// Still pending (the claim died with an instance before it
		// committed): claim again (a worker's assigned tasks come first,
		// oldest first) and fail again.
		claim()
	}
}

// requireOneRetryEach checks that every id failed once and got exactly one
// retry, one task.retried and one "Retry #1 created" update.
func (c *cluster) requireOneRetryEach(ids []string) {
	c.t.Helper()
	c.eventually("every failure to be decided", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND retry_outcome IS NOT NULL`, ids) == len(ids)
	})
	require.Equal(c.t, len(ids), c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND status = 'failed' AND retry_outcome = 'retried'`, ids))
	require.Equal(c.t, len(ids), c.count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id = ANY($1)`, ids))
	require.Equal(c.t, len(ids), c.count(`SELECT count(*) FROM task_events WHERE type = 'task.retried' AND stream_id = ANY($1)`, ids))
	require.Equal(c.t, len(ids), c.count(`SELECT count(*) FROM task_events WHERE type = 'task.failed' AND stream_id = ANY($1)`, ids))
	require.Equal(c.t, len(ids), c.count(`SELECT count(*) FROM worker_task_updates WHERE task_id = ANY($1) AND message LIKE 'Retry #1 created: %'`, ids))
	require.Zero(c.t, c.count(`SELECT count(*) FROM (SELECT stream_id FROM task_events WHERE type = 'task.retried'
		GROUP BY stream_id HAVING count(*) > 1) d`))
}

// Three instances while 200 tasks fail: every failure gets exactly one retry.
// The instances' retry reactors race for each batch (at most 100 events) on
// every commit's wake; 200 failures, one commit each from ten workers
// through all three instances, are some 200 such races and more than one
// batch's worth.
func TestInstancesRetryEveryFailureOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	retries := 1
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "burst", MaxRetries: &retries})
	require.NoError(t, err)
	ids := c.failBurst(tt, 10, 20, nil)
	require.Len(t, ids, 200)
	c.requireOneRetryEach(ids)

	// Each instance's stats agree.
	for _, in := range c.ins {
		admin := client.New(in.base, c.hc)
		admin.SetToken(c.admin.Token())
		stats, err := admin.Stats(c.ctx)
		require.NoError(t, err)
		require.EqualValues(t, 0, stats["failed_awaiting_retry"])
	}
}

// SIGKILL one instance in the middle of the burst, restart it: nothing is
// lost or doubled.
func TestInstancesSurviveKill(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	retries := 1
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crash", MaxRetries: &retries})
	require.NoError(t, err)
	victim := c.ins[1]
	ids := c.failBurst(tt, 10, 30, func() {
		victim.stop(syscall.SIGKILL)
		go victim.start()
	})
	c.requireOneRetryEach(ids)
	c.eventually("the restarted instance to be ready", func() bool {
		resp, err := http.Get(victim.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Workers go silent holding tasks; three instances run the stuck detector
// with short thresholds: each worker goes offline once, each task is failed
// once and retried once, and a live worker claims the retries.
func TestInstancesStuckDetector(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, "STUCK_TICK=200ms", "WORKER_OFFLINE_AFTER=2s", "TASK_STUCK_AFTER=3s")
	retries := 2
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "long", MaxRetries: &retries})
	require.NoError(t, err)
	const silent, perWorker = 5, 10
	var ids, silentIDs []string
	for i := range silent {
		w := c.worker(fmt.Sprintf("silent%d", i), perWorker)
		silentIDs = append(silentIDs, w.id)
		cl := w.clients[i%len(w.clients)]
		for range perWorker {
			// Alive until its tasks are claimed: the detector gives the
			// pre-assigned tasks of a silent worker back to the pool.
			require.NoError(t, cl.Heartbeat(c.ctx, client.Heartbeat{Status: "working"}))
			task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "Long job", TaskTypeID: tt.ID, AssignedTo: w.id})
			require.NoError(t, err)
			got, err := cl.Claim(c.ctx)
			require.NoError(t, err)
			require.Equal(t, task.ID, got.ID)
			ids = append(ids, task.ID)
		}
	}
	// A live worker keeps heart-beating and takes the retries.
	rescuer := c.worker("rescuer", 1)
	stop := make(chan struct{})
	var beats sync.WaitGroup
	beats.Go(func() {
		for {
			_ = rescuer.do(0, func(cl *client.Client) error { return cl.Heartbeat(c.ctx, client.Heartbeat{Status: "idle"}) })
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	defer func() { close(stop); beats.Wait() }()

	c.eventually("every stuck task to be failed and retried", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND retry_outcome = 'retried'`, ids) == len(ids)
	})
	require.Equal(t, len(ids), c.count(`SELECT count(*) FROM task_events WHERE type = 'task.failed' AND stream_id = ANY($1)
		AND data->>'kind' = 'worker_offline'`, ids))
	require.Equal(t, len(ids), c.count(`SELECT count(*) FROM task_events WHERE type = 'task.failed' AND stream_id = ANY($1)`, ids))
	require.Equal(t, len(ids), c.count(`SELECT count(*) FROM worker_task_updates WHERE task_id = ANY($1)
		AND message LIKE 'Worker silent% went offline. Task marked as failed for retry.'`, ids))
	// Each silent worker went offline once for each time it was online: a
	// loaded machine may stretch its setup past the threshold (it then
	// comes back with its next heartbeat), but no instance marks an
	// offline worker offline again.
	require.Zero(t, c.count(`SELECT count(*) FROM (SELECT type, lag(type) OVER (PARTITION BY stream_id ORDER BY version) AS before
		FROM task_events WHERE stream_id = ANY($1) AND type IN ('worker.went_online', 'worker.went_offline')) e
		WHERE type = 'worker.went_offline' AND before = 'worker.went_offline'`, silentIDs), "offline twice in a row")
	require.Equal(t, silent, c.count(`SELECT count(DISTINCT stream_id) FROM task_events WHERE type = 'worker.went_offline'
		AND stream_id = ANY($1)`, silentIDs), "each silent worker went offline")
	require.Equal(t, len(ids), c.count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id = ANY($1)`, ids))

	for range ids {
		var got *string
		err := rescuer.do(0, func(cl *client.Client) error {
			t, err := cl.Claim(c.ctx)
			if t != nil {
				got = &t.ID
			}
			return err
		})
		require.NoError(t, err)
		require.NotNil(t, got, "a retry is claimable")
		_, err = rescuer.clients[0].Complete(c.ctx, *got)
		require.NoError(t, err)
	}
	require.Equal(t, len(ids), c.count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id = ANY($1) AND status = 'completed'`, ids))
}
