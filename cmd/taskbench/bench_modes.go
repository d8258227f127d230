package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// outcome is what one step of a worker's loop did.
type outcome int

const (
	claimedOne outcome = iota // claimed and completed tasks (one, or a batch)
	emptyClaim                // the claim found nothing; try again
	finished                  // nothing left to do: the worker stops
)

// stepped is one step's report: what it did, how many tasks it completed
// (claimedOne only), and how long its claim call took (the only latency
// measured).
type stepped struct {
	outcome outcome
	tasks   int
	claim   time.Duration
}

// step is one iteration of a worker's loop.
type step func(ctx context.Context) (stepped, error)

// one is the report of a step that claimed and completed a single task.
func one(took time.Duration) stepped { return stepped{outcome: claimedOne, tasks: 1, claim: took} }

// run resets the tables, pre-fills the queue for mode, then times w workers
// draining n tasks (or until --duration), and checks the result.
func (env *benchEnv) run(ctx context.Context, mode string, w, n, batch int) (*benchResult, error) {
	label := fmt.Sprintf("[%s %dw]", mode, w)
	if batch > 0 {
		label = fmt.Sprintf("[%s/%d %dw]", mode, batch, w)
	}
	if err := env.reset(ctx); err != nil {
		return nil, err
	}
	if drains(mode) {
		fmt.Fprintf(env.progress, "bench: %s pre-filling %d tasks\n", label, n)
	} else {
		fmt.Fprintf(env.progress, "bench: %s logging in; the run creates %d tasks\n", label, n)
	}
	start := time.Now()
	steps, cleanup, err := env.prepare(ctx, mode, w, n, batch)
	if cleanup != nil {
		defer cleanup()
	}
	if err != nil {
		return nil, err
	}
	// Open every connection the run will use now, so neither its time nor
	// its backend's start-up CPU is counted.
	if err := warm(ctx, env.pool, w+2); err != nil {
		return nil, err
	}
	if (mode == modeHTTP || mode == modeHTTPBatch || mode == modeHTTPCreate) && env.serverPool != nil {
		if err := warm(ctx, env.serverPool, w+2); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(env.progress, "bench: %s ready in %.1fs; timing %d workers\n", label, time.Since(start).Seconds(), w)
	r, err := env.drive(ctx, label, mode, batch, steps, n)
	if err != nil {
		return nil, err
	}
	r.Batch = batch
	verify := env.verify
	if mode == modeHTTPCreate {
		verify = func(ctx context.Context, _ string, done int) error { return env.verifyCreated(ctx, done) }
	}
	if err := verify(ctx, mode, r.Tasks); err != nil {
		return nil, err
	}
	return r, nil
}

// warm makes the pool hold at least n open connections.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) error {
	n = min(n, int(pool.Config().MaxConns))
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("open connections: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// prepare pre-fills the queue and returns one step per worker.
func (env *benchEnv) prepare(ctx context.Context, mode string, w, n, batch int) ([]step, func(), error) {
	steps := make([]step, w)
	switch mode {
	case modeBare:
		if err := env.prefillBare(ctx, n); err != nil {
			return nil, nil, err
		}
		for i := range steps {
			steps[i] = env.bareStep(env.workers[i].id)
		}
	case modeStore:
		if err := env.prefillStore(ctx, n); err != nil {
			return nil, nil, err
		}
		for i := range steps {
			steps[i] = env.storeStep(env.workers[i].id)
		}
	case modeStoreCreate:
		var left atomic.Int64
		left.Store(int64(n))
		for i := range steps {
			steps[i] = env.storeCreateStep(env.workers[i].id, &left)
		}
	case modeHTTP, modeHTTPBatch, modeHTTPCreate:
		var left atomic.Int64
		left.Store(int64(n))
		if mode != modeHTTPCreate {
			if err := env.prefillStore(ctx, n); err != nil {
				return nil, nil, err
			}
		}
		var transports []*http.Transport
		cleanup := func() {
			for _, t := range transports {
				t.CloseIdleConnections()
			}
		}
		for i := range steps {
			// One client and one connection pool per worker, as separate
			// worker processes would have.
			tr := &http.Transport{MaxIdleConns: 4, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}
			transports = append(transports, tr)
			c := client.New(env.apiBase, &http.Client{Transport: tr, Timeout: time.Minute})
			user := env.workers[i].email
			if mode == modeHTTPCreate {
				user = benchAdmin
			}
			if _, err := c.Login(ctx, user, benchPassword); err != nil {
				return nil, cleanup, fmt.Errorf("log in as %s at %s: %w (with --api, the server must use database %s)",
					user, env.apiBase, err, env.cfg.benchDB)
			}
			switch mode {
			case modeHTTP:
				steps[i] = httpStep(c)
			case modeHTTPBatch:
				steps[i] = httpBatchStep(c, batch)
			default:
				steps[i] = env.httpCreateStep(c, batch, &left)
			}
		}
		return steps, cleanup, nil
	default:
		return nil, nil, fmt.Errorf("unknown mode %q", mode)
	}
	return steps, nil, nil
}

const (
	bareClaim = `UPDATE worker_tasks SET status = 'in_progress', assigned_to = $1, started_at = now()
 WHERE id = (SELECT id FROM worker_tasks WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated
              ORDER BY priority_rank, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
 RETURNING id`
	bareComplete = `UPDATE worker_tasks SET status = 'completed', completed_at = now() WHERE id = $1`
)

// bareStep is the machine's limit: the same claim and completion on the
// same table, autocommitted, with no events, projections or checks.
func (env *benchEnv) bareStep(worker string) step {
	return func(ctx context.Context) (stepped, error) {
		var id string
		t0 := time.Now()
		err := env.pool.QueryRow(ctx, bareClaim, worker).Scan(&id)
		took := time.Since(t0)
		if errors.Is(err, pgx.ErrNoRows) {
			return stepped{outcome: finished, claim: took}, nil
		}
		if err != nil {
			return stepped{}, fmt.Errorf("claim: %w", err)
		}
		if _, err := env.pool.Exec(ctx, bareComplete, id); err != nil {
			return stepped{}, fmt.Errorf("complete: %w", err)
		}
		return one(took), nil
	}
}

func workerMeta(worker string) events.Meta {
	return events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}}
}

// storeStep is the store-level lifecycle: Claim, then CompleteTask, each
// its own transaction as the API runs them.
func (env *benchEnv) storeStep(worker string) step {
	meta := workerMeta(worker)
	return func(ctx context.Context) (stepped, error) {
		t0 := time.Now()
		t, err := env.db.Claim(ctx, worker, meta)
		took := time.Since(t0)
		if err != nil {
			return stepped{}, fmt.Errorf("claim: %w", err)
		}
		if t == nil {
			return stepped{outcome: finished, claim: took}, nil
		}
		return one(took), env.complete(ctx, worker, t.ID, meta)
	}
}

func (env *benchEnv) complete(ctx context.Context, worker, id string, meta events.Meta) error {
	if _, _, err := env.db.CompleteTask(ctx, id, worker, meta); err != nil {
		return fmt.Errorf("complete %s: %w", id, err)
	}
	return nil
}

// storeCreateStep adds the creation to the timed loop: create, claim,
// complete, until left is used up.
func (env *benchEnv) storeCreateStep(worker string, left *atomic.Int64) step {
	meta := workerMeta(worker)
	creator := events.Meta{Actor: events.System("bench")}
	return func(ctx context.Context) (stepped, error) {
		i := left.Add(-1)
		if i < 0 {
			return stepped{outcome: finished}, nil
		}
		if _, err := env.db.CreateTask(ctx, env.pool, env.newTask(int(i)), creator); err != nil {
			return stepped{}, fmt.Errorf("create: %w", err)
		}
		// SKIP LOCKED may, rarely, pass over every pending row while others
		// are mid-claim; claim again a few times before moving on.
		var took time.Duration
		for range 3 {
			t0 := time.Now()
			t, err := env.db.Claim(ctx, worker, meta)
			took += time.Since(t0)
			if err != nil {
				return stepped{}, fmt.Errorf("claim: %w", err)
			}
			if t != nil {
				return one(took), env.complete(ctx, worker, t.ID, meta)
			}
		}
		return stepped{outcome: emptyClaim, claim: took}, nil
	}
}

// httpStep is a real client's loop: POST claim, PUT status completed.
func httpStep(c *client.Client) step {
	return func(ctx context.Context) (stepped, error) {
		t0 := time.Now()
		t, err := c.Claim(ctx)
		took := time.Since(t0)
		if err != nil {
			return stepped{}, fmt.Errorf("claim: %w", err)
		}
		if t == nil {
			return stepped{outcome: finished, claim: took}, nil
		}
		if _, err := c.Complete(ctx, t.ID); err != nil {
			return stepped{}, fmt.Errorf("complete %s: %w", t.ID, err)
		}
		return one(took), nil
	}
}

// httpBatchStep is the batched lane (ADR 016): claim up to batch tasks in
// one request, then complete them all in one request.
func httpBatchStep(c *client.Client, batch int) step {
	return func(ctx context.Context) (stepped, error) {
		t0 := time.Now()
		tasks, err := c.ClaimMany(ctx, batch, 0)
		took := time.Since(t0)
		if err != nil {
			return stepped{}, fmt.Errorf("claim %d: %w", batch, err)
		}
		if len(tasks) == 0 {
			return stepped{outcome: finished, claim: took}, nil
		}
		items := make([]client.Finish, len(tasks))
		for i, t := range tasks {
			items[i] = client.Finish{ID: t.ID, Status: events.StatusCompleted}
		}
		res, err := c.FinishMany(ctx, items)
		if err != nil {
			return stepped{}, fmt.Errorf("complete %d: %w", len(items), err)
		}
		for _, r := range res {
			if err := r.Err(); err != nil {
				return stepped{}, fmt.Errorf("complete %s: %w", r.ID, err)
			}
		}
		return stepped{outcome: claimedOne, tasks: len(tasks), claim: took}, nil
	}
}

// httpCreateStep creates up to batch of the tasks left in one batch
// request (POST .../tasks/batch, with no Idempotency-Key: River's inserts
// have none either), until none is left.
func (env *benchEnv) httpCreateStep(c *client.Client, batch int, left *atomic.Int64) step {
	return func(ctx context.Context) (stepped, error) {
		end := int(left.Add(-int64(batch))) + batch
		if end <= 0 {
			return stepped{outcome: finished}, nil
		}
		start := max(0, end-batch)
		tasks := make([]json.RawMessage, 0, end-start)
		for i := start; i < end; i++ {
			tasks = append(tasks, json.RawMessage(fmt.Sprintf(`{"title":"bench task %d","task_type_id":%q,"params":{"n":%d}}`, i, env.typeID, i)))
		}
		var out client.CreatedBatch
		t0 := time.Now()
		err := c.Do(ctx, http.MethodPost, "/api/v1/admin/workers/tasks/batch", map[string]any{"tasks": tasks}, &out)
		took := time.Since(t0)
		if err != nil {
			return stepped{}, fmt.Errorf("create %d: %w", len(tasks), err)
		}
		if out.Created != len(tasks) {
			return stepped{}, fmt.Errorf("created %d of %d: %+v", out.Created, len(tasks), out.Items[0])
		}
		return stepped{outcome: claimedOne, tasks: len(tasks), claim: took}, nil
	}
}

// drive starts every worker at once, times them until each has finished
// (or --duration passed), and prints progress to stderr meanwhile.
func (env *benchEnv) drive(ctx context.Context, label, mode string, batch int, steps []step, n int) (*benchResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var done, empty atomic.Int64
	lat := make([][]time.Duration, len(steps))
	var deadline time.Time
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range steps {
		lat[i] = make([]time.Duration, 0, n/len(steps)+16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
				st, err := s(ctx)
				if err != nil {
					cancel(err)
					return
				}
				switch st.outcome {
				case finished:
					return
				case emptyClaim:
					empty.Add(1)
					continue
				}
				lat[i] = append(lat[i], st.claim)
				done.Add(int64(st.tasks))
			}
		}()
	}

	stopProfile, err := env.startProfile(mode, batch, len(steps))
	if err != nil {
		return nil, err
	}
	cpuBefore := sampleCPU(ctx, env.pool)
	start := time.Now()
	if env.cfg.duration > 0 {
		deadline = start.Add(env.cfg.duration)
	}
	close(gate) // written before the gate opens, read after: no race on deadline
	finishedAll := make(chan struct{})
	go func() { wg.Wait(); close(finishedAll) }()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-finishedAll:
			break wait
		case <-tick.C:
			d := done.Load()
			fmt.Fprintf(env.progress, "bench: %s %d/%d tasks, %.0f tasks/s so far\n", label, d, n, float64(d)/time.Since(start).Seconds())
		}
	}
	elapsed := time.Since(start)
	cpuAfter := sampleCPU(ctx, env.pool)
	stopProfile()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}

	all := make([]time.Duration, 0, done.Load())
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := &benchResult{Mode: mode, Workers: len(steps), Tasks: int(done.Load()), Seconds: elapsed.Seconds(),
		EmptyClaims: int(empty.Load()), ClaimP50Ms: percentileMs(all, 0.50), ClaimP99Ms: percentileMs(all, 0.99)}
	r.TasksPerSec = float64(r.Tasks) / r.Seconds
	cpuPerTask(r, cpuBefore, cpuAfter)
	return r, nil
}

// percentileMs is the nearest-rank percentile of sorted durations, in ms.
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(len(sorted)-1, i))
	return float64(sorted[i].Microseconds()) / 1000
}

// startProfile starts a CPU profile of one timed run when --cpuprofile is
// set; the returned func stops it.
func (env *benchEnv) startProfile(mode string, batch, w int) (func(), error) {
	if env.cfg.cpuProfile == "" {
		return func() {}, nil
	}
	if batch > 0 {
		mode = fmt.Sprintf("%s%d", mode, batch)
	}
	return startCPUProfile(fmt.Sprintf("%s-%s-%d.pprof", env.cfg.cpuProfile, mode, w), env.progress)
}

// startCPUProfile profiles this process into name until the returned func
// is called.
func startCPUProfile(name string, progress io.Writer) (func(), error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		fmt.Fprintf(progress, "bench: wrote %s\n", name)
	}, nil
}

func newUUID() string { return uuid.Must(uuid.NewV7()).String() }
