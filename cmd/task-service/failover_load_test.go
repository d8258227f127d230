package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// The failover under load: a private primary and a streaming standby, three
// instances on a multi-host DATABASE_URL, a fleet of task-worker processes
// and batched claimers, and a steady stream of creates. The primary is
// killed with -9 while the reactors are held behind a few failures, and the
// standby is promoted. These runs take minutes: make test-slow runs them.

// slowTests skips t unless make test-slow asked for the slow tests.
func slowTests(t *testing.T, why string) {
	if os.Getenv("TEST_SLOW") == "" {
		t.Skip("runs in make test-slow (TEST_SLOW=1): " + why)
	}
}

// With synchronous replication the promoted standby holds every answer the
// service gave: nothing acknowledged is lost, no task runs twice.
func TestFailoverUnderLoadSynchronous(t *testing.T) {
	slowTests(t, "a private primary and standby under a task-worker fleet for a few minutes")
	runFailoverUnderLoad(t, true)
}

// With asynchronous replication (no lag added) the standby may miss what
// the primary committed in its last moments: only acknowledgements given
// before the promotion may be lost, and only tasks whose first run started
// before it may run twice (docs/deploy.md lists what).
func TestFailoverUnderLoadAsynchronous(t *testing.T) {
	slowTests(t, "a private primary and standby under a task-worker fleet for a few minutes")
	runFailoverUnderLoad(t, false)
}

// claimTiming is when a claim that got a task was sent and answered.
type claimTiming struct{ sent, answered time.Time }

// failoverRun is one run's load and what it saw.
type failoverRun struct {
	t       *testing.T
	ins     []*instance
	hc      *http.Client
	admin   []*client.Client // one per instance, same token
	typ     *events.TaskType
	runsLog string // task-worker's command appends "<task id> <unix time>" per run

	mu     sync.Mutex
	acked  map[string]time.Time   // task id -> when its create was answered 2xx
	runs   map[string][]time.Time // batched claimers' runs
	claims []claimTiming          // batched claims that got a task
	sent   atomic.Int64           // creates sent again with their key after a 5xx or no answer
	unav   atomic.Int64           // requests answered 5xx or not at all (retried)
	probs  []string               // what the load saw that it must not
}

func runFailoverUnderLoad(t *testing.T, synchronous bool) {
	ctx := context.Background()
	began := time.Now()
	primary := startPrivatePG(t)
	standby := primary.standby(t)
	mode := "asynchronous"
	if synchronous {
		mode = "synchronous"
		makeSynchronous(t, primary)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/taskservice?sslmode=disable&target_session_attrs=read-write",
		primary.port, standby.port)
	ins := startInstances(t, url, 3, "DB_MAX_CONNS=10")
	require.False(t, t.Failed())
	t.Logf("%s replication; primary, standby and 3 instances up in %v", mode, time.Since(began).Round(time.Millisecond))

	r := &failoverRun{t: t, ins: ins, acked: map[string]time.Time{}, runs: map[string][]time.Time{},
		hc: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	login := client.New(ins[0].base, r.hc)
	_, err := login.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	for _, in := range ins {
		c := client.New(in.base, r.hc)
		c.SetToken(login.Token())
		r.admin = append(r.admin, c)
	}
	retries := 1
	r.typ, err = login.CreateTaskType(ctx, client.NewTaskType{Name: "failover", MaxRetries: &retries})
	require.NoError(t, err)

	// The fleet: a task-worker process (two slots) and a batched claimer
	// on each instance.
	dir := t.TempDir()
	r.runsLog = filepath.Join(dir, "runs")
	workerBin := buildBinary(t, "task-worker")
	script := filepath.Join(dir, "work.sh")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
echo "$TASK_ID $(date +%s.%N)" >> "$RUNS_LOG"
if [ "$TASK_ATTEMPT" = 1 ] && grep -q '"fail": *true' "$TASK_PARAMS_FILE"; then echo 'failed on purpose' >&2; exit 1; fi
echo '{}'
`), 0o755))
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var claimers sync.WaitGroup
	for i, in := range ins {
		email := fmt.Sprintf("fleet%d@failover.example.com", i)
		_, err := login.CreateWorker(ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: email, MaxConcurrentTasks: 2})
		require.NoError(t, err)
		startTaskWorker(t, workerBin, in.base, email, script, r.runsLog, filepath.Join(dir, fmt.Sprintf("work%d", i)))
		c := r.newClaimer(fmt.Sprintf("batch%d@failover.example.com", i), in)
		claimers.Go(func() { r.claim(loadCtx, c) })
	}
	defer claimers.Wait()
	defer stopLoad()

	// The create stream: 5 a second through each instance, each create
	// with its own Idempotency-Key, sent again with it until answered.
	produceCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	var producers sync.WaitGroup
	var next atomic.Int64
	for i := range ins {
		producers.Go(func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-produceCtx.Done():
					return
				case <-tick.C:
				}
				r.create(i, int(next.Add(1)))
			}
		})
	}
	defer producers.Wait()
	defer stopProducing()

	pre, err := pgxpool.New(ctx, primary.url)
	require.NoError(t, err)
	defer pre.Close()
	waitFor(t, 3*time.Minute, "the fleet to complete tasks and retry failures", func() bool {
		return countIn(t, pre, `SELECT count(*) FROM worker_tasks WHERE status = 'completed' AND parent_task_id IS NOT NULL`) > 0
	})
	holdConn, behind := holdReactorsBack(t, primary, standby)
	pre.Close()

	// The failover: every process of the primary is killed, the standby promoted.
	killAll(t, primary.postmaster(t))
	killed := time.Now()
	_ = holdConn.Close(context.Background())
	require.NoError(t, standby.pgCtl("promote"))
	promoted := time.Now()
	t.Logf("the standby was promoted %v after the kill", promoted.Sub(killed).Round(time.Millisecond))

	// Every instance's pool and listener reconnect: /readyz says so.
	t.Logf("FIGURE %s kill to /readyz ready on each instance: %v", mode, waitReady(t, ins, killed))
	t.Logf("FIGURE %s kill to first claim: %v", mode, r.firstClaimAfter(killed).Sub(killed).Round(time.Millisecond))

	// The load goes on past the failover, then the fleet drains the queue.
	post, err := pgxpool.New(ctx, standby.url)
	require.NoError(t, err)
	defer post.Close()
	waitFor(t, 2*time.Minute, "creates answered on the new primary", func() bool { return r.ackedAfter(promoted) >= 3*len(ins) })
	stopProducing()
	producers.Wait()
	waitFor(t, 4*time.Minute, "the fleet to drain the queue", func() bool {
		return countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND (status IN ('pending', 'in_progress')
			OR status = 'failed' AND retry_outcome IS NULL)`, r.typ.ID) == 0
	})
	stopLoad()
	claimers.Wait()

	r.mu.Lock()
	probs := slices.Clone(r.probs)
	r.mu.Unlock()
	require.Empty(t, probs, "the load saw what it must not")
	r.checkCreates(post, mode, synchronous, promoted)
	r.checkTasks(post)
	r.checkRuns(post, mode, synchronous, promoted)

	// The reactors caught up from their checkpoints: the failures held
	// back before the kill were retried, once, on the new primary.
	require.Equal(t, len(behind), countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE parent_task_id = ANY($1::uuid[])`, behind))
	require.Equal(t, len(behind), countIn(t, post, `SELECT count(*) FROM task_events WHERE type = 'task.retried' AND stream_id = ANY($1::uuid[])
		AND occurred_at > $2`, behind, killed))
	t.Logf("%d failures committed before the kill, held back from the reactors, were retried after it", len(behind))

	out, err := taskctlReplayVerify(t, standby.url)
	require.NoError(t, err, "taskctl replay --verify:\n%s", out)
	t.Logf("taskctl replay --verify: %s", lastLine(out))
}

// holdReactorsBack opens a transaction with an id on the primary, which
// keeps every consumer below it, and waits until failures committed after
// it are on the standby too: those are decided only after the failover,
// from the checkpoints on the new primary. It returns the transaction's
// connection and those failures.
func holdReactorsBack(t *testing.T, primary, standby *privatePG) (*pgx.Conn, []string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, primary.url)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var held string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&held))
	sc, err := pgx.Connect(ctx, standby.url)
	require.NoError(t, err)
	defer sc.Close(ctx)
	var behind []string
	waitFor(t, 2*time.Minute, "a failure after the held transaction to reach the standby", func() bool {
		require.NoError(t, sc.QueryRow(ctx, `SELECT coalesce(array_agg(w.id::text), '{}') FROM worker_tasks w
			WHERE w.status = 'failed' AND w.retry_outcome IS NULL AND EXISTS (SELECT 1 FROM task_events e
			WHERE e.stream_id = w.id AND e.type = 'task.failed' AND e.tx_id > $1::text::xid8)`, held).Scan(&behind))
		return len(behind) > 0
	})
	return conn, behind
}

// killAll kills a server's main process and its children with SIGKILL.
func killAll(t *testing.T, postmaster int) {
	kids := childProcesses(postmaster)
	require.NoError(t, syscall.Kill(postmaster, syscall.SIGKILL))
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// waitReady waits until every instance's /readyz is ready and returns how
// long after since each was first seen ready.
func waitReady(t *testing.T, ins []*instance, since time.Time) []time.Duration {
	readyAt := make([]time.Duration, len(ins))
	waitFor(t, time.Minute, "every instance ready on the new primary", func() bool {
		all := true
		for i, in := range ins {
			if readyAt[i] == 0 && readyz(in.base) == http.StatusOK {
				readyAt[i] = time.Since(since)
			}
			all = all && readyAt[i] != 0
		}
		return all
	})
	return readyAt
}

// firstClaimAfter waits for a claim sent after t0 that got a task, and
// returns when the first such claim was answered.
func (r *failoverRun) firstClaimAfter(t0 time.Time) time.Time {
	var first time.Time
	waitFor(r.t, time.Minute, "a claim answered with a task after the kill", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.claims {
			if c.sent.After(t0) && (first.IsZero() || c.answered.Before(first)) {
				first = c.answered
			}
		}
		return !first.IsZero()
	})
	return first
}

// ackedAfter counts the creates answered after t0.
func (r *failoverRun) ackedAfter(t0 time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.acked {
		if at.After(t0) {
			n++
		}
	}
	return n
}

// checkCreates: every acknowledged create exists (asynchronous replication
// may lose only what was answered before the promotion), and no re-sent
// create made a second task.
func (r *failoverRun) checkCreates(post *pgxpool.Pool, mode string, synchronous bool, promoted time.Time) {
	t := r.t
	r.mu.Lock()
	acked := maps.Clone(r.acked)
	r.mu.Unlock()
	ids := slices.Collect(maps.Keys(acked))
	var exist []string
	require.NoError(t, post.QueryRow(context.Background(), `SELECT coalesce(array_agg(id::text), '{}') FROM worker_tasks
		WHERE id = ANY($1::uuid[])`, ids).Scan(&exist))
	var lost []string
	for _, id := range ids {
		if !slices.Contains(exist, id) {
			lost = append(lost, id)
		}
	}
	t.Logf("FIGURE %s creates acknowledged: %d (%d after the promotion), re-sent with their key: %d, requests answered 5xx or not at all: %d; acknowledged creates lost: %d",
		mode, len(acked), r.ackedAfter(promoted), r.sent.Load(), r.unav.Load(), len(lost))
	for _, id := range lost {
		require.False(t, synchronous, "synchronous replication lost the acknowledged create of %s", id)
		require.True(t, acked[id].Before(promoted), "a create acknowledged after the promotion was lost: %s", id)
	}
	require.Equal(t, len(exist), countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL`, r.typ.ID),
		"a first attempt that no create was answered for: a re-sent create made a duplicate")
}

// checkTasks counts in the database as the soak does: every first attempt
// completed, or failed on purpose with one retry that completed; none
// pending or in progress; one completion, failure or retry event each; a
// task claimed again only after it was given back (a worker releases what
// the service says it holds but it does not run).
func (r *failoverRun) checkTasks(post *pgxpool.Pool) {
	t, typ := r.t, r.typ.ID
	roots := `SELECT id FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL`
	failRoots := countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL AND params->>'fail' = 'true'`, typ)
	all := countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL`, typ)
	require.Zero(t, countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status IN ('pending', 'in_progress')`, typ), "stuck")
	require.Equal(t, all-failRoots, countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL AND status = 'completed'`, typ))
	require.Equal(t, failRoots, countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL
		AND status = 'failed' AND retry_outcome = 'retried'`, typ))
	require.Equal(t, failRoots, countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE parent_task_id IN (`+roots+`)`, typ), "one retry per failure")
	require.Equal(t, failRoots, countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE parent_task_id IN (`+roots+`) AND status = 'completed'`, typ))
	require.Zero(t, countIn(t, post, `SELECT count(*) FROM (SELECT stream_id, type FROM task_events
		WHERE type IN ('task.completed', 'task.failed', 'task.retried')
		AND stream_id IN (SELECT id FROM worker_tasks WHERE task_type_id = $1) GROUP BY 1, 2 HAVING count(*) > 1) d`, typ),
		"a completion, failure or retry event twice")
	require.Zero(t, countIn(t, post, `SELECT count(*) FROM (SELECT stream_id FROM task_events
		WHERE stream_id IN (SELECT id FROM worker_tasks WHERE task_type_id = $1)
		GROUP BY 1 HAVING count(*) FILTER (WHERE type = 'task.claimed') <> 1 + count(*) FILTER (WHERE type = 'task.released')) d`, typ),
		"a task claimed twice without being given back in between")
}

// checkRuns: every task that exists ran, each once; with asynchronous
// replication a task may run again only if it first ran before the
// promotion (its claim or its finish was lost).
func (r *failoverRun) checkRuns(post *pgxpool.Pool, mode string, synchronous bool, promoted time.Time) {
	t, typ := r.t, r.typ.ID
	runs := r.allRuns()
	doubled := 0
	for id, at := range runs {
		if len(at) < 2 {
			continue
		}
		doubled++
		require.False(t, synchronous, "synchronous replication: task %s ran %d times", id, len(at))
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		require.True(t, at[0].Before(promoted), "task %s ran twice, the first time after the promotion", id)
	}
	tasks := countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1`, typ)
	require.Equal(t, tasks, countIn(t, post, `SELECT count(*) FROM worker_tasks WHERE id = ANY($1::uuid[]) AND task_type_id = $2`,
		slices.Collect(maps.Keys(runs)), typ), "every task that exists ran")
	released := countIn(t, post, `SELECT count(DISTINCT stream_id) FROM task_events WHERE type = 'task.released'
		AND stream_id IN (SELECT id FROM worker_tasks WHERE task_type_id = $1)`, typ)
	t.Logf("FIGURE %s tasks: %d (first attempts and retries), %d runs, %d tasks run twice, %d given back by their worker and claimed again",
		mode, tasks, countRuns(runs), doubled, released)
}

// countIn runs a count(*) query on pool.
func countIn(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// makeSynchronous makes the primary wait for the standby's flush at every
// commit (the standby's walreceiver reports as cluster_name "standby").
func makeSynchronous(t *testing.T, primary *privatePG) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, primary.url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'standby'`, `ALTER SYSTEM SET synchronous_commit = 'on'`, `SELECT pg_reload_conf()`} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "the standby to be synchronous", func() bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync'`).Scan(&n))
		return n == 1
	})
}

// create makes logical task n through instance i, sending it again with
// the same Idempotency-Key while it is answered 5xx or not at all.
func (r *failoverRun) create(i, n int) {
	ctx := client.WithIdempotencyKey(context.Background(), fmt.Sprintf("failover-%d", n))
	task := client.NewTask{Title: fmt.Sprintf("failover %d", n), TaskTypeID: r.typ.ID,
		Params: json.RawMessage(fmt.Sprintf(`{"fail":%v}`, n%5 == 4))}
	var got *events.Task
	err := r.retry(i, func(c *client.Client, attempt int) error {
		if attempt > 0 {
			r.sent.Add(1)
		}
		var err error
		got, err = c.CreateTask(ctx, task)
		return err
	})
	if err != nil {
		r.problem("create %d: %v", n, err)
		return
	}
	r.mu.Lock()
	r.acked[got.ID] = time.Now()
	r.mu.Unlock()
}

// retry runs op through instance i while it is answered 5xx or not at all
// (three minutes at most); any other answer is returned.
func (r *failoverRun) retry(i int, op func(c *client.Client, attempt int) error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for attempt := 0; ; attempt++ {
		err := op(r.admin[i], attempt)
		var apiErr *client.Error
		if err == nil || errors.As(err, &apiErr) && apiErr.Status < 500 {
			return err
		}
		r.unav.Add(1)
		if time.Now().After(deadline) {
			return fmt.Errorf("unavailable for 3 minutes: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *failoverRun) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.probs) < 50 {
		r.probs = append(r.probs, fmt.Sprintf(format, args...))
	}
}

// claimer is a worker that claims in batches (POST /worker/tasks/claims)
// and reports in batches (POST /worker/tasks/completions).
type claimer struct {
	name string
	c    *client.Client
}

func (r *failoverRun) newClaimer(email string, in *instance) *claimer {
	ctx := context.Background()
	_, err := r.admin[0].CreateWorker(ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: email, MaxConcurrentTasks: 4})
	require.NoError(r.t, err)
	c := client.New(in.base, r.hc)
	_, err = c.Login(ctx, email, "worker-password")
	require.NoError(r.t, err)
	return &claimer{name: email, c: c}
}

// claim claims up to four tasks at a time and finishes them, until ctx
// ends. After a claim that was not answered, or when none came, it
// finishes what the service says it holds: a claim whose answer was lost,
// or (asynchronous replication) a finish the failover lost.
func (r *failoverRun) claim(ctx context.Context, c *claimer) {
	var lastBeat time.Time
	for ctx.Err() == nil {
		if time.Since(lastBeat) > 10*time.Second {
			if c.c.Heartbeat(ctx, client.Heartbeat{Status: "working"}) == nil {
				lastBeat = time.Now()
			}
		}
		sent := time.Now()
		got, err := c.c.ClaimMany(ctx, 4, time.Second)
		if ctx.Err() != nil {
			return
		}
		if len(got) > 0 {
			r.mu.Lock()
			r.claims = append(r.claims, claimTiming{sent: sent, answered: time.Now()})
			r.mu.Unlock()
		}
		if err != nil || len(got) == 0 {
			if err != nil {
				time.Sleep(100 * time.Millisecond)
			}
			r.adopt(ctx, c)
			continue
		}
		var tasks []events.Task
		for _, g := range got {
			tasks = append(tasks, g.Task)
		}
		r.finish(ctx, c, tasks)
	}
}

// adopt finishes the tasks the service holds in progress under c.
func (r *failoverRun) adopt(ctx context.Context, c *claimer) {
	mine, err := c.c.MyTasks(ctx, false)
	if err != nil {
		return // the next round asks again
	}
	var held []events.Task
	for _, t := range mine {
		if t.Status == events.StatusInProgress {
			held = append(held, t)
		}
	}
	if len(held) > 0 {
		r.finish(ctx, c, held)
	}
}

// finish "runs" the tasks (recording each run) and reports them in one
// request, sent again while it is answered 5xx or not at all. A task the
// request could not finish is settled on its own.
func (r *failoverRun) finish(ctx context.Context, c *claimer, tasks []events.Task) {
	items := make([]client.Finish, len(tasks))
	r.mu.Lock()
	for i, t := range tasks {
		r.runs[t.ID] = append(r.runs[t.ID], time.Now())
		items[i] = client.Finish{ID: t.ID, Status: events.StatusCompleted}
		var p struct{ Fail bool }
		_ = json.Unmarshal(t.Params, &p)
		if p.Fail && t.RetryCount == 0 {
			items[i] = client.Finish{ID: t.ID, Status: events.StatusFailed, Reason: "failed on purpose"}
		}
	}
	r.mu.Unlock()
	for ctx.Err() == nil {
		res, err := c.c.FinishMany(ctx, items)
		var apiErr *client.Error
		switch {
		case err == nil:
			// Each item is answered on its own: one answered 5xx (the
			// database went away under it) is sent again.
			var again []client.Finish
			for i, x := range res {
				var itemErr *client.Error
				switch {
				case x.Success || client.IsStatus(x.Err(), http.StatusConflict):
					// finished, or no longer ours: the service's answer stands
				case errors.As(x.Err(), &itemErr) && itemErr.Status >= 500:
					again = append(again, items[i])
				default:
					r.problem("%s: finish %s: %v", c.name, x.ID, x.Err())
				}
			}
			if len(again) == 0 {
				return
			}
			items = again
		case errors.As(err, &apiErr) && apiErr.Status < 500:
			// Refused as a whole, nothing changed: a task is no longer
			// ours (its claim or an earlier finish was lost). Report each
			// on its own; the service's answer stands for each.
			for _, it := range items {
				r.finishOne(ctx, c, it)
			}
			return
		}
		r.unav.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
}

// finishOne reports one task, sent again while answered 5xx or not at
// all; a 4xx means it is not ours to finish any more.
func (r *failoverRun) finishOne(ctx context.Context, c *claimer, it client.Finish) {
	for ctx.Err() == nil {
		var err error
		if it.Status == events.StatusFailed {
			_, err = c.c.Fail(ctx, it.ID, it.Reason)
		} else {
			_, err = c.c.Complete(ctx, it.ID)
		}
		var apiErr *client.Error
		if err == nil || errors.As(err, &apiErr) && apiErr.Status < 500 {
			return
		}
		r.unav.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
}

// allRuns merges the task-worker runs (the script's log) with the
// batched claimers'.
func (r *failoverRun) allRuns() map[string][]time.Time {
	out := map[string][]time.Time{}
	b, err := os.ReadFile(r.runsLog)
	require.NoError(r.t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		require.Len(r.t, f, 2, "run log line %q", line)
		sec, err := strconv.ParseFloat(f[1], 64)
		require.NoError(r.t, err)
		out[f[0]] = append(out[f[0]], time.Unix(0, int64(sec*1e9)))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, at := range r.runs {
		out[id] = append(out[id], at...)
	}
	return out
}

func countRuns(runs map[string][]time.Time) int {
	n := 0
	for _, at := range runs {
		n += len(at)
	}
	return n
}

// startTaskWorker runs a task-worker process with two slots against base;
// it is killed when the test ends.
func startTaskWorker(t *testing.T, bin, base, email, command, runsLog, workDir string) {
	cmd := exec.Command(bin, "--api", base, "--email", email, "--work-dir", workDir, "--command", command, "--slots", "2",
		"--claim-wait", "2s", "--poll-interval", "100ms", "--kill-grace", "1s", "--log-format", "json", "--log-level", "info")
	cmd.Env = baseEnv("TASK_WORKER_PASSWORD=worker-password", "RUNS_LOG="+runsLog)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("task-worker %s (tail):\n%s", email, tail(logs.String(), 3000))
		}
	})
}

// buildBinary builds cmd/<name> into the test's temporary directory.
func buildBinary(t *testing.T, name string) string {
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "../"+name).CombinedOutput()
	require.NoError(t, err, "build %s: %s", name, out)
	return bin
}

// taskctlReplayVerify runs taskctl replay --verify on the database at url.
func taskctlReplayVerify(t *testing.T, url string) (string, error) {
	cmd := exec.Command(buildBinary(t, "taskctl"), "replay", "--verify")
	cmd.Env = baseEnv("DATABASE_URL=" + url)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// childProcesses are pid's direct children (a PostgreSQL server's backends
// and helpers).
func childProcesses(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// readyz is the instance's /readyz status, 0 when it does not answer.
func readyz(base string) int {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls cond every 50 ms until it holds, failing t after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
