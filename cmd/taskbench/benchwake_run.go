package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// wakeClaimWait is the workers' long-poll wait; it never runs out while
// tasks keep coming.
const wakeClaimWait = 30 * time.Second

// benchWake prepares the scratch database and two instances, then times
// the tasks from their creation to a worker's hands.
func benchWake(ctx context.Context, cfg wakeConfig, progress io.Writer) (*wakeReport, error) {
	env, err := openBenchEnv(ctx, benchConfig{databaseURL: cfg.databaseURL, benchDB: cfg.benchDB}, cfg.workers, progress)
	if err != nil {
		return nil, err
	}
	defer env.close()
	dbURL, err := withDatabase(cfg.databaseURL, cfg.benchDB)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	// Instances of one deployment share the JWT secret.
	jwtSecret := []byte(hex.EncodeToString(secret))

	// The workers' instance; the notify path creates through a second one.
	instances := map[string]*wakeInstance{}
	polled, err := startWakeInstance(ctx, "polled", dbURL, jwtSecret, cfg, cfg.workers+8, progress)
	if err != nil {
		return nil, err
	}
	defer polled.stop()
	instances[wakeLocal], instances[wakeRunAt] = polled, polled
	running := []*wakeInstance{polled}
	if contains(cfg.paths, wakeNotify) {
		other, err := startWakeInstance(ctx, "other", dbURL, jwtSecret, cfg, 8, progress)
		if err != nil {
			return nil, err
		}
		defer other.stop()
		instances[wakeNotify] = other
		running = append(running, other)
	}
	admins := map[string]*client.Client{}
	for _, p := range cfg.paths {
		c := client.New(instances[p].base, &http.Client{Timeout: time.Minute})
		if _, err := c.Login(ctx, benchAdmin, benchPassword); err != nil {
			return nil, fmt.Errorf("log in as the bench admin at %s: %w", instances[p].base, err)
		}
		admins[p] = c
	}

	rep := newWakeReport(cfg, env.pgVersion)
	rec := &wakeRecorder{byID: map[string]*wakeSample{}}
	workCtx, stopWork := context.WithCancelCause(ctx)
	defer stopWork(nil)
	var workers sync.WaitGroup
	for _, w := range env.workers[:cfg.workers] {
		// One client and connection pool per worker, as separate worker
		// processes would have.
		tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}
		defer tr.CloseIdleConnections()
		c := client.New(polled.base, &http.Client{Transport: tr, Timeout: wakeClaimWait + 30*time.Second})
		if _, err := c.Login(ctx, w.email, benchPassword); err != nil {
			return nil, fmt.Errorf("log in as %s: %w", w.email, err)
		}
		workers.Go(func() {
			if err := wakeWorker(workCtx, c, cfg.max, rec); err != nil {
				stopWork(err)
			}
		})
	}
	fmt.Fprintf(progress, "bench-wake: %d workers long-polling %s; %d warm-up tasks, then %d timed, one every %s on average, through %v\n",
		cfg.workers, polled.base, rep.Warmup, cfg.tasks, cfg.every, cfg.paths)

	warm := wakeWarmup(cfg)
	var before, after wakeCounters
	err = createSpaced(workCtx, cfg, env.typeID, admins, rec, 0, warm, false, progress)
	if err == nil {
		fmt.Fprintf(progress, "bench-wake: warm-up done; timing %d tasks\n", cfg.tasks)
		before, err = readWakeCounters(workCtx, env.pool, polled, running)
	}
	stopProfile := func() {}
	if err == nil && cfg.cpuProfile != "" {
		stopProfile, err = startCPUProfile(cfg.cpuProfile, progress)
	}
	if err == nil {
		err = createSpaced(workCtx, cfg, env.typeID, admins, rec, warm, cfg.tasks, true, progress)
	}
	if err == nil {
		after, err = readWakeCounters(workCtx, env.pool, polled, running)
	}
	stopProfile()
	stopWork(nil)
	workers.Wait()
	if cause := context.Cause(workCtx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if err != nil {
		return nil, err
	}
	rep.LoadAfter = loadAverage()
	if err := rec.check(); err != nil {
		return nil, err
	}
	if rep.CommitExact, err = rec.readCommits(ctx, env.pool); err != nil {
		return nil, err
	}
	for _, p := range cfg.paths {
		rep.Paths = append(rep.Paths, rec.result(p))
	}
	rep.ClaimsPerTask = float64(after.claims-before.claims) / float64(cfg.tasks)
	rep.WALBytesPerTask = float64(after.walBytes-before.walBytes) / float64(cfg.tasks)
	cpu := benchResult{Tasks: cfg.tasks}
	cpuPerTask(&cpu, before.cpu, after.cpu)
	rep.BenchCPUUsPerTask, rep.PGCPUUsPerTask = cpu.BenchCPUUsPerTask, cpu.PGCPUUsPerTask
	wait := benchResult{Tasks: cfg.tasks}
	cpuPerTask(&wait, before.runWait, after.runWait)
	rep.BenchRunWaitUsPerTask, rep.PGRunWaitUsPerTask = wait.BenchCPUUsPerTask, wait.PGCPUUsPerTask
	return rep, nil
}

// wakeWorker long-polls claims and completes what it gets until ctx ends.
func wakeWorker(ctx context.Context, c *client.Client, max int, rec *wakeRecorder) error {
	for {
		tasks, err := c.ClaimMany(ctx, max, wakeClaimWait)
		at := time.Now()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(tasks) == 0 {
			continue // the wait ran out
		}
		items := make([]client.Finish, len(tasks))
		for i, t := range tasks {
			rec.received(t.ID, t.StartedAt, at)
			items[i] = client.Finish{ID: t.ID, Status: events.StatusCompleted}
		}
		res, err := c.FinishMany(ctx, items)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("complete %d: %w", len(items), err)
		}
		for _, r := range res {
			if err := r.Err(); err != nil {
				return fmt.Errorf("complete %s: %w", r.ID, err)
			}
		}
	}
}

// wakeBlock is how many tasks in a row take the same path. The paths take
// turns so that both meet the same moments of a shared machine's load,
// but never overlap: a local create wakes the polled instance, and its
// workers would take a notify-path task waiting for its NOTIFY with it.
const wakeBlock = 25

// createSpaced creates tasks first to first+n-1, one at a time, with
// random gaps around cfg.every, a block of wakeBlock on each path in turn;
// before switching paths it waits until the workers have every task.
func createSpaced(ctx context.Context, cfg wakeConfig, typeID string, admins map[string]*client.Client, rec *wakeRecorder,
	first, n int, timed bool, progress io.Writer) error {
	next := time.Now()
	lastReport := next
	for i := first; i < first+n; i++ {
		path := cfg.paths[((i-first)/wakeBlock)%len(cfg.paths)]
		if i > first && (i-first)%wakeBlock == 0 && len(cfg.paths) > 1 {
			if err := rec.waitAll(ctx); err != nil {
				return err
			}
		}
		next = next.Add(cfg.every/2 + mrand.N(cfg.every))
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d):
			}
		} else {
			next = time.Now() // late (a slow create or a path switch): go now, keep the gaps after
		}
		sent := time.Now()
		nt := client.NewTask{Title: fmt.Sprintf("wake %d", i), TaskTypeID: typeID}
		var runAt time.Time
		if path == wakeRunAt {
			// Truncated as the server stores it, so no task is due before its recorded run_at.
			runAt = sent.Add(cfg.runAtLead).Truncate(time.Microsecond)
			nt.RunAt = runAt.UTC().Format(time.RFC3339Nano)
		}
		t, err := admins[path].CreateTask(ctx, nt)
		answered := time.Now()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("create task %d through %s: %w", i, path, err)
		}
		if answered.After(runAt) && !runAt.IsZero() {
			return fmt.Errorf("task %d: its create took %s, longer than the run-at lead %s (a loaded machine? raise --run-at-lead)", i, answered.Sub(sent), cfg.runAtLead)
		}
		rec.created(t.ID, path, timed, sent, answered, t.CreatedAt, runAt)
		if timed && time.Since(lastReport) >= 2*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(progress, "bench-wake: %d/%d tasks created\n", i+1-first, n)
		}
	}
	return rec.waitAll(ctx)
}

// wakeCounters are what the timed tasks cost, read before and after them.
type wakeCounters struct {
	claims   uint64 // claim statements run by the polled instance
	walBytes int64  // WAL written by the whole server
	// cpu: the bench's processes (this one, with the workers and the
	// admin, and the task-service instances) as self; the database's
	// backends.
	cpu cpuSample
	// runWait is how long the same threads and backends were ready to run
	// but waited for a CPU.
	runWait cpuSample
}

func readWakeCounters(ctx context.Context, pool *pgxpool.Pool, polled *wakeInstance, instances []*wakeInstance) (wakeCounters, error) {
	var c wakeCounters
	var err error
	if c.claims, err = polled.claimAttempts(ctx); err != nil {
		return c, err
	}
	if err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&c.walBytes); err != nil {
		return c, fmt.Errorf("read the WAL position: %w", err)
	}
	c.cpu = sampleCPU(ctx, pool)
	c.runWait = sampleRunWait(ctx, pool, "self")
	for _, inst := range instances {
		cpu, _ := procCPU(inst.pid)
		c.cpu.self += cpu
		c.runWait.self += threadsRunWait(strconv.Itoa(inst.pid))
	}
	return c, nil
}

// sampleRunWait reads, from /proc/PID/task/*/schedstat, how long the
// threads of proc (a pid, or self) and the bench database's backends have
// waited for a CPU while ready to run; no backends when they are not
// visible (a remote server).
func sampleRunWait(ctx context.Context, pool *pgxpool.Pool, proc string) cpuSample {
	s := cpuSample{self: threadsRunWait(proc)}
	s.backends = sampleBackends(ctx, pool, func(pid int) (time.Duration, bool) {
		return runWaitOf(fmt.Sprintf("/proc/%d/schedstat", pid))
	})
	return s
}

// threadsRunWait sums the run-queue wait of the live threads of proc.
func threadsRunWait(proc string) time.Duration {
	var sum time.Duration
	threads, _ := os.ReadDir("/proc/" + proc + "/task")
	for _, t := range threads {
		if d, ok := runWaitOf("/proc/" + proc + "/task/" + t.Name() + "/schedstat"); ok {
			sum += d
		}
	}
	return sum
}

// runWaitOf is the second field of a schedstat file: nanoseconds spent
// runnable on a run queue.
func runWaitOf(path string) (time.Duration, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(ns), err == nil
}

// wakeSample is one task's timestamps: the creator's, the server's and the
// worker's.
type wakeSample struct {
	path      string
	timed     bool
	createdBy bool // the creator recorded it
	sent      time.Time
	runAt     time.Time // the run-at path's; zero on the others
	answered  time.Time
	committed time.Time // PostgreSQL's commit time of the create; zero unless track_commit_timestamp is on
	createdAt time.Time // the server's, at the create statement
	startedAt time.Time // the server's, at the claim statement
	received  time.Time
	receipts  int
}

// wakeRecorder collects the samples of creator and workers, by task id;
// either may come first.
type wakeRecorder struct {
	mu       sync.Mutex
	byID     map[string]*wakeSample
	made     atomic.Int64
	receipts atomic.Int64
}

func (r *wakeRecorder) sample(id string) *wakeSample {
	s := r.byID[id]
	if s == nil {
		s = &wakeSample{}
		r.byID[id] = s
	}
	return s
}

func (r *wakeRecorder) created(id, path string, timed bool, sent, answered, createdAt, runAt time.Time) {
	r.mu.Lock()
	s := r.sample(id)
	s.path, s.timed, s.createdBy = path, timed, true
	s.sent, s.answered, s.createdAt, s.runAt = sent, answered, createdAt, runAt
	r.mu.Unlock()
	r.made.Add(1)
}

func (r *wakeRecorder) received(id string, startedAt *time.Time, at time.Time) {
	r.mu.Lock()
	s := r.sample(id)
	s.receipts++
	if s.receipts == 1 {
		s.received = at
		if startedAt != nil {
			s.startedAt = *startedAt
		}
	}
	r.mu.Unlock()
	r.receipts.Add(1)
}

// waitAll waits until every task created so far reached a worker; a task
// that takes longer than a long-poll's safety re-check several times over
// fails the bench.
func (r *wakeRecorder) waitAll(ctx context.Context) error {
	const giveUp = 30 * time.Second
	deadline := time.Now().Add(giveUp)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for r.receipts.Load() < r.made.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d tasks created but only %d reached a worker within %s", r.made.Load(), r.receipts.Load(), giveUp)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// check fails the run unless every task was created by the bench and
// reached exactly one worker exactly once.
func (r *wakeRecorder) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.byID {
		switch {
		case !s.createdBy:
			return fmt.Errorf("a worker received task %s, which the bench did not create", id)
		case s.receipts != 1:
			return fmt.Errorf("task %s reached workers %d times (want exactly once)", id, s.receipts)
		case s.startedAt.IsZero():
			return fmt.Errorf("task %s reached a worker without started_at", id)
		case !s.runAt.IsZero() && s.startedAt.Before(s.runAt):
			return fmt.Errorf("task %s was claimed at %s, before its run_at %s", id, s.startedAt, s.runAt)
		}
	}
	return nil
}

// readCommits reads the commit time PostgreSQL recorded for each timed
// task's create (its task.created event's xmin: events are never updated),
// when the server has track_commit_timestamp on; false when it is off.
func (r *wakeRecorder) readCommits(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var tracked string
	if err := pool.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&tracked); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	if tracked != "on" {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, s := range r.byID {
		if s.timed {
			ids = append(ids, id)
		}
	}
	rows, err := pool.Query(ctx, `SELECT stream_id::text, pg_xact_commit_timestamp(xmin) FROM task_events
		WHERE stream_id = ANY($1::uuid[]) AND version = 1`, ids)
	if err != nil {
		return false, fmt.Errorf("read the creates' commit times: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var at *time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return false, fmt.Errorf("read the creates' commit times: %w", err)
		}
		if s := r.byID[id]; s != nil && at != nil {
			s.committed = *at
			n++
		}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read the creates' commit times: %w", err)
	}
	if n != len(ids) {
		// Commits from before the setting took effect have no time.
		return false, nil
	}
	return true, nil
}

// result computes one path's percentiles over its timed tasks.
func (r *wakeRecorder) result(path string) wakePathResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := wakePathResult{Path: path}
	var create, fromSent, fromCreated, fromCommit, toCreate, toClaim, toWorker []time.Duration
	for _, s := range r.byID {
		if s.path != path || !s.timed {
			continue
		}
		res.Tasks++
		if s.receipts > 0 {
			res.Received++
		}
		create = append(create, s.answered.Sub(s.sent))
		from := s.sent
		if !s.runAt.IsZero() {
			from = s.runAt
		}
		fromSent = append(fromSent, s.received.Sub(from))
		fromCreated = append(fromCreated, s.received.Sub(s.answered))
		if committed := s.committed; committed.IsZero() {
			fromCommit = append(fromCommit, s.received.Sub(s.answered))
		} else {
			fromCommit = append(fromCommit, s.received.Sub(committed))
		}
		toCreate = append(toCreate, s.createdAt.Sub(s.sent))
		toClaim = append(toClaim, s.startedAt.Sub(s.createdAt))
		toWorker = append(toWorker, s.received.Sub(s.startedAt))
	}
	res.Create, res.FromSent, res.FromCreated = wakePercentiles(create), wakePercentiles(fromSent), wakePercentiles(fromCreated)
	res.FromCommit = wakePercentiles(fromCommit)
	res.ToCreateStatement, res.ToClaimStatement, res.ToWorker = wakePercentiles(toCreate), wakePercentiles(toClaim), wakePercentiles(toWorker)
	return res
}

func wakePercentiles(ds []time.Duration) wakeStats {
	slices.Sort(ds)
	return wakeStats{P50Ms: percentileMs(ds, 0.50), P90Ms: percentileMs(ds, 0.90), P99Ms: percentileMs(ds, 0.99), MaxMs: percentileMs(ds, 1)}
}

// wakeInstance is one task-service process of the bench.
type wakeInstance struct {
	base string
	pid  int
	stop func()
}

// claimAttempts is how many claim statements the instance's long-polls
// and claims have run so far (a wake that finds nothing runs one too),
// read from its /metrics.
func (inst *wakeInstance) claimAttempts(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read the metrics of %s: %w", inst.base, err)
	}
	defer res.Body.Close()
	var n uint64
	found := false
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// taskservice_claim_duration_seconds_count{...} N: one line per label set.
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "taskservice_claim_duration_seconds_count") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("metrics of %s: %q: %w", inst.base, sc.Text(), err)
		}
		n += uint64(v)
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read the metrics of %s: %w", inst.base, err)
	}
	if !found {
		return 0, fmt.Errorf("%s/metrics has no taskservice_claim_duration_seconds", inst.base)
	}
	return n, nil
}

// startWakeInstance starts the task-service binary on a loopback port of
// its own against the bench database, with a clean environment (nothing
// of the caller's settings leaks in), and waits until /readyz says its
// database and LISTEN connection are up.
func startWakeInstance(ctx context.Context, name, dbURL string, jwtSecret []byte, cfg wakeConfig, conns int, progress io.Writer) (*wakeInstance, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free loopback port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(cfg.service, "serve")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + dbURL,
		"LISTEN_ADDR=" + addr,
		"JWT_SECRET=" + string(jwtSecret),
		"NOTIFY_INTERVAL=" + cfg.notifyInterval.String(),
		"DB_MAX_CONNS=" + strconv.Itoa(conns),
		"LOG_LEVEL=warn",
		"LOG_FORMAT=json",
		"DIGEST_AT=off",
	}
	// The Go runtime's settings, as a deployment would give them.
	for _, name := range []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG"} {
		if v, ok := os.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	out := prefixWriter(progress, name+": ")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.service, err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		out.Close()
		exited <- err
	}()
	inst := &wakeInstance{base: "http://" + addr, pid: cmd.Process.Pid}
	inst.stop = func() {
		// As an orchestrator stops it: SIGTERM drains the waiting claims.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.base+"/readyz", nil)
		if err != nil {
			inst.stop()
			return nil, err
		}
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return inst, nil
			}
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("%s (%s) exited before it was ready: %v", name, cfg.service, err)
		case <-ctx.Done():
			inst.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			inst.stop()
			return nil, fmt.Errorf("%s at %s not ready after a minute", name, inst.base)
		}
	}
}

// prefixWriter writes each line to w with prefix before it, until closed.
func prefixWriter(w io.Writer, prefix string) io.WriteCloser {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return pw
}
