package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// The soak run (make soak): three instances of the real binary on a
// private PostgreSQL under a claim-and-complete load like taskbench lanes's
// http lane, for SOAK_DURATION, while faults (kill -9 of an instance,
// PostgreSQL fast and immediate restarts, a long open transaction) and the
// hostile inputs of issue 20 come round on a loop. Then: nothing lost or
// doubled, taskctl replay --verify clean, every instance's resident memory
// flat. It prints a summary and fails on any of these.

// soakConfig is what the SOAK_* variables say.
type soakConfig struct {
	duration   time.Duration
	workers    int
	faultEvery time.Duration
	rate       int // tasks created per second; 0: as fast as the workers take them
}

func soakConfigFromEnv(t *testing.T) soakConfig {
	raw := os.Getenv("SOAK_DURATION")
	if raw == "" {
		t.Skip("the soak runs with make soak (SOAK_DURATION)")
	}
	cfg := soakConfig{workers: 16, faultEvery: 15 * time.Second}
	var err error
	cfg.duration, err = time.ParseDuration(raw)
	require.NoError(t, err, "SOAK_DURATION")
	if v := os.Getenv("SOAK_WORKERS"); v != "" {
		cfg.workers, err = strconv.Atoi(v)
		require.NoError(t, err, "SOAK_WORKERS")
	}
	if v := os.Getenv("SOAK_FAULT_EVERY"); v != "" {
		cfg.faultEvery, err = time.ParseDuration(v)
		require.NoError(t, err, "SOAK_FAULT_EVERY")
	}
	if v := os.Getenv("SOAK_RATE"); v != "" {
		cfg.rate, err = strconv.Atoi(v)
		require.NoError(t, err, "SOAK_RATE")
	}
	return cfg
}

// soak is one run: the cluster, the load's clients and what was counted.
type soak struct {
	t     *testing.T
	cfg   soakConfig
	pg    *privatePG
	ins   []*instance
	hc    *http.Client
	pool  *pgxpool.Pool
	admin []*client.Client // one per instance, same token
	typ   *events.TaskType

	created     atomic.Int64 // logical tasks (unique keys) the service answered for
	resent      atomic.Int64 // creations sent again after a lost answer
	completed   atomic.Int64 // soak tasks completed (each logical task once)
	failed      atomic.Int64 // first attempts failed on purpose
	adopted     atomic.Int64 // tasks a worker found it held after a lost claim answer
	unavailable atomic.Int64 // load requests unanswered or 503 (retried)
	serverErrs  atomic.Int64 // load requests answered with another 5xx

	mu        sync.Mutex
	problems  []string // what the load saw that it must not
	faults    []string // the faults, in order
	faultKind map[string]int
	rss       map[string][]rssSample
}

type rssSample struct {
	at  time.Duration
	pid int
	rss int64
}

func TestSoak(t *testing.T) {
	cfg := soakConfigFromEnv(t)
	start := time.Now()
	pg := startPrivatePG(t)
	ins := startInstances(t, pg.url, 3, "DB_MAX_CONNS=20")
	require.False(t, t.Failed())
	s := newSoak(t, cfg, pg, ins)
	h := newHostile(s)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var bg sync.WaitGroup
	bg.Go(func() { s.sampleMemory(ctx, start) })
	bg.Go(func() { s.injectFaults(ctx) })
	bg.Go(func() { h.run(ctx) })
	produced := make(chan struct{})
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	go func() { defer close(produced); s.produce(ctx) }()
	var workers sync.WaitGroup
	for i := range cfg.workers {
		w := s.newWorker(fmt.Sprintf("soak%02d", i))
		workers.Go(func() { s.work(loadCtx, w, i, produced) })
	}

	fmt.Fprintf(os.Stderr, "soak: %d workers on 3 instances and PostgreSQL on port %d for %v\n", cfg.workers, pg.port, cfg.duration)
	loadStart := time.Now()
	time.Sleep(cfg.duration)
	stop() // producer, faults, hostile inputs; the sampler goes on below
	<-produced
	bg.Wait()
	drained := s.waitDrained()
	stopLoad()
	workers.Wait()
	loadTime := time.Since(loadStart)
	s.sampleMemory(ctx, start) // one last sample (ctx is done)

	checks := s.countChecks()
	checks = append(checks, h.checks()...)
	checks = append(checks, s.metricsChecks()...)
	replayOut, replayErr := s.replayVerify()
	memory, memoryOK := s.memoryReport()
	pass := drained && replayErr == nil && memoryOK && len(s.problems) == 0 && h.unexpected.Load() == 0
	for _, c := range checks {
		pass = pass && c.ok
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n==== soak summary ====\n")
	fmt.Fprintf(&b, "duration   %v of load (%v with set-up, drain and checks), %d workers, 3 instances, PostgreSQL 15 on port %d\n",
		cfg.duration, time.Since(start).Round(time.Second), cfg.workers, pg.port)
	fmt.Fprintf(&b, "tasks      %d created (%d creations re-sent after a lost answer), %d completed, %d failed on purpose and retried; %.1f tasks/s from the start of the load to the end of the drain\n",
		s.created.Load(), s.resent.Load(), s.completed.Load(), s.failed.Load(), float64(s.completed.Load())/loadTime.Seconds())
	fmt.Fprintf(&b, "faults     %d: %s\n", len(s.faults), s.faultCounts())
	fmt.Fprintf(&b, "load       %d requests unanswered or 503 during faults (retried), %d other 5xx, %d claims adopted after a lost answer\n",
		s.unavailable.Load(), s.serverErrs.Load(), s.adopted.Load())
	fmt.Fprintf(&b, "hostile    %s\n", h.summary())
	fmt.Fprintf(&b, "drained    %v\n", drained)
	for _, c := range checks {
		fmt.Fprintf(&b, "check      %-4s %s\n", map[bool]string{true: "ok", false: "FAIL"}[c.ok], c.what)
	}
	if replayErr != nil {
		fmt.Fprintf(&b, "replay     FAIL taskctl replay --verify: %v\n%s\n", replayErr, tail(replayOut, 3000))
	} else {
		fmt.Fprintf(&b, "replay     ok   taskctl replay --verify: %s\n", lastLine(replayOut))
	}
	fmt.Fprintf(&b, "memory     resident set of each instance (MB): first / last / max over the run\n%s", memory)
	for _, p := range s.problems {
		fmt.Fprintf(&b, "problem    %s\n", p)
	}
	fmt.Fprintf(&b, "RESULT     %s\n", map[bool]string{true: "PASS", false: "FAIL"}[pass])
	fmt.Print(b.String())
	if !pass {
		t.Fail()
	}
}

func newSoak(t *testing.T, cfg soakConfig, pg *privatePG, ins []*instance) *soak {
	ctx := context.Background()
	s := &soak{t: t, cfg: cfg, pg: pg, ins: ins, faultKind: map[string]int{}, rss: map[string][]rssSample{},
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	login := client.New(ins[0].base, s.hc)
	_, err := login.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	for _, in := range ins {
		c := client.New(in.base, s.hc)
		c.SetToken(login.Token())
		s.admin = append(s.admin, c)
	}
	retries := 1
	s.typ, err = login.CreateTaskType(ctx, client.NewTaskType{Name: "soak", MaxRetries: &retries})
	require.NoError(t, err)
	s.pool, err = pgxpool.New(ctx, pg.url)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)
	return s
}

func (s *soak) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 50 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

// call runs op through instance first, then the next ones, until an
// instance answers with something other than "unavailable": no answer (a
// killed instance) or 503 (the database restarting). Those are retried for
// up to three minutes; any other answer is returned.
func (s *soak) call(clients []*client.Client, first int, op func(*client.Client) error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; ; i++ {
		err := op(clients[(first+i)%len(clients)])
		var apiErr *client.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable:
			if apiErr.Status >= 500 {
				s.serverErrs.Add(1)
			}
			return err
		}
		s.unavailable.Add(1)
		if time.Now().After(deadline) {
			return fmt.Errorf("unavailable for 3 minutes: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// produce creates soak tasks from four goroutines until ctx ends: each
// logical task has its own unique key, so a creation whose answer was lost
// is sent again and answered with the task it made. One in five fails on
// its first attempt.
func (s *soak) produce(ctx context.Context) {
	var tick <-chan time.Time
	if s.cfg.rate > 0 {
		tk := time.NewTicker(time.Second / time.Duration(s.cfg.rate))
		defer tk.Stop()
		tick = tk.C
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						return
					}
				}
				// At most 200 tasks waiting, like the bench's pre-filled queue.
				if s.created.Load()-s.completed.Load() >= 200 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				s.create(int(next.Add(1)))
			}
		})
	}
	wg.Wait()
}

// create makes logical task n, sending it again while no answer comes.
func (s *soak) create(n int) {
	task := client.NewTask{Title: fmt.Sprintf("soak %d", n), TaskTypeID: s.typ.ID,
		Params: json.RawMessage(fmt.Sprintf(`{"fail":%v}`, n%5 == 4)), UniqueKey: fmt.Sprintf("soak-%d", n),
		UniqueFor: "24h", OnDuplicate: "existing"}
	attempts := 0
	err := s.call(s.admin, n, func(c *client.Client) error {
		attempts++
		_, created, err := c.CreateTaskOnce(context.Background(), task)
		if err == nil && !created && attempts == 1 {
			s.problem("create %s: the first attempt found the key taken", task.UniqueKey)
		}
		return err
	})
	if err != nil {
		s.problem("create %s: %v", task.UniqueKey, err)
		return
	}
	if attempts > 1 {
		s.resent.Add(1)
	}
	s.created.Add(1)
}

// soakWorker is one worker user with a client per instance (same token).
type soakWorker struct {
	name    string
	clients []*client.Client
}

func (s *soak) newWorker(name string) *soakWorker {
	ctx := context.Background()
	email := name + "@soak.example.com"
	_, err := s.admin[0].CreateWorker(ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: name, MaxConcurrentTasks: 2})
	require.NoError(s.t, err)
	login := client.New(s.ins[0].base, s.hc)
	_, err = login.Login(ctx, email, "worker-password")
	require.NoError(s.t, err)
	w := &soakWorker{name: name}
	for _, in := range s.ins {
		c := client.New(in.base, s.hc)
		c.SetToken(login.Token())
		w.clients = append(w.clients, c)
	}
	return w
}

// work claims and finishes tasks until the producer is done and everything
// it made is finished (or ctx ends). After a claim whose answer may have
// been lost, the worker adopts what it holds, as a restarted worker would.
func (s *soak) work(ctx context.Context, w *soakWorker, i int, produced <-chan struct{}) {
	lastBeat := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastBeat) > 10*time.Second {
			_ = s.call(w.clients, i, func(c *client.Client) error {
				return c.Heartbeat(context.Background(), client.Heartbeat{Status: "working"})
			})
			lastBeat = time.Now()
		}
		var task *events.Task
		lost := false
		err := s.call(w.clients, i, func(c *client.Client) error {
			got, err := c.ClaimWait(context.Background(), 2*time.Second)
			if err != nil {
				lost = true // the claim may have committed before the answer was lost
			}
			if got != nil {
				task = &got.Task
			}
			return err
		})
		if err != nil {
			s.problem("%s: claim: %v", w.name, err)
			time.Sleep(time.Second)
			continue
		}
		if lost {
			// What it claimed, and what a claim whose answer was lost
			// took, are both in progress now: adopt finishes them all.
			s.adopt(w, i)
			continue
		}
		if task == nil {
			select {
			case <-produced:
				if s.completed.Load() >= s.created.Load() {
					s.adopt(w, i)
					if s.completed.Load() >= s.created.Load() {
						return
					}
				}
			default:
			}
			continue
		}
		s.finish(w, i, task)
	}
}

// adopt finishes the tasks w holds in progress.
func (s *soak) adopt(w *soakWorker, i int) {
	var mine []events.Task
	err := s.call(w.clients, i, func(c *client.Client) error {
		var err error
		mine, err = c.MyTasks(context.Background(), false)
		return err
	})
	if err != nil {
		s.problem("%s: list my tasks: %v", w.name, err)
		return
	}
	for _, t := range mine {
		if t.Status == events.StatusInProgress {
			s.adopted.Add(1)
			s.finish(w, i, &t)
		}
	}
}

// finish completes a task, or fails a soak task's first attempt when its
// params say so. An answer lost in a crash is found out by reading the task.
func (s *soak) finish(w *soakWorker, i int, task *events.Task) {
	var p struct{ Fail bool }
	_ = json.Unmarshal(task.Params, &p)
	fail := task.TaskTypeID == s.typ.ID && p.Fail && task.RetryCount == 0
	for attempt := 0; attempt < 10; attempt++ {
		err := s.call(w.clients, i+1, func(c *client.Client) error {
			var err error
			if fail {
				_, err = c.Fail(context.Background(), task.ID, "soak: failed on purpose")
			} else {
				_, err = c.Complete(context.Background(), task.ID)
			}
			return err
		})
		if err == nil || client.IsStatus(err, http.StatusConflict) && s.finished(w, i, task.ID) {
			if task.TaskTypeID == s.typ.ID {
				if fail {
					s.failed.Add(1)
				} else {
					s.completed.Add(1)
				}
			}
			return
		}
		if !client.IsStatus(err, http.StatusConflict) {
			s.problem("%s: finish %s: %v", w.name, task.ID, err)
			return
		}
	}
	s.problem("%s: finish %s: still not finished after 10 attempts", w.name, task.ID)
}

// finished reports whether the task is finished already: a finish whose
// answer was lost committed.
func (s *soak) finished(w *soakWorker, i int, id string) bool {
	var t *events.Task
	err := s.call(w.clients, i, func(c *client.Client) error {
		got, err := c.MyTask(context.Background(), id)
		if got != nil {
			t = &got.Task
		}
		return err
	})
	return err == nil && t != nil && (t.Status == events.StatusCompleted || t.Status == events.StatusFailed)
}

// waitDrained waits until every created task was completed (five minutes
// at most).
func (s *soak) waitDrained() bool {
	deadline := time.Now().Add(5 * time.Minute)
	for s.completed.Load() < s.created.Load() {
		if time.Now().After(deadline) {
			s.problem("not drained after 5 minutes: %d created, %d completed", s.created.Load(), s.completed.Load())
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// injectFaults runs one fault every faultEvery, in turn: kill -9 of
// instance 1, a fast PostgreSQL restart, kill -9 of instance 2, an
// immediate PostgreSQL restart, a transaction held open for 10 s.
// Instance 0 is never killed: its memory is the one measured for
// flatness across the whole run.
func (s *soak) injectFaults(ctx context.Context) {
	faults := []struct {
		name string
		run  func() error
	}{
		{"kill -9 instance-1", func() error { return s.killAndRestart(s.ins[1]) }},
		{"PostgreSQL fast restart", func() error { return s.pg.restart("fast") }},
		{"kill -9 instance-2", func() error { return s.killAndRestart(s.ins[2]) }},
		{"PostgreSQL immediate restart", func() error { return s.pg.restart("immediate") }},
		{"open transaction for 10 s", func() error { return holdTransaction(context.Background(), s.pg.url, 10*time.Second) }},
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.faultEvery):
		}
		f := faults[i%len(faults)]
		start := time.Now()
		err := f.run()
		s.mu.Lock()
		s.faults = append(s.faults, f.name)
		s.faultKind[f.name]++
		s.mu.Unlock()
		if err != nil {
			s.problem("fault %s: %v", f.name, err)
		}
		fmt.Fprintf(os.Stderr, "soak: %s (%v)\n", f.name, time.Since(start).Round(time.Millisecond))
	}
}

// killAndRestart kills an instance with SIGKILL, and starts it again on
// the same address after a second; it returns once the new one is ready.
func (s *soak) killAndRestart(in *instance) error {
	in.stop(syscall.SIGKILL)
	time.Sleep(time.Second)
	in.start()
	return nil
}

func (s *soak) faultCounts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for name, n := range s.faultKind {
		parts = append(parts, fmt.Sprintf("%d × %s", n, name))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// sampleMemory reads each instance's resident set every few seconds (once
// when ctx is already done).
func (s *soak) sampleMemory(ctx context.Context, start time.Time) {
	every := min(max(s.cfg.duration/120, time.Second), 10*time.Second)
	for {
		for _, in := range s.ins {
			in.mu.Lock()
			cmd := in.cmd
			in.mu.Unlock()
			if cmd == nil || cmd.Process == nil {
				continue
			}
			if n := rss(s.t, cmd.Process.Pid); n > 0 {
				s.mu.Lock()
				s.rss[in.name] = append(s.rss[in.name], rssSample{at: time.Since(start), pid: cmd.Process.Pid, rss: n})
				s.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// memoryReport gives first, last and max per instance, and checks that no
// instance went above 300 MB and that the never-killed one is flat: the
// median of the run's last quarter at most 25 % (+16 MB) above that of its
// second quarter (the first is warm-up).
func (s *soak) memoryReport() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	ok := true
	for _, in := range s.ins {
		samples := s.rss[in.name]
		if len(samples) == 0 {
			fmt.Fprintf(&b, "           %s: no samples\n", in.name)
			ok = false
			continue
		}
		peak, pids := int64(0), map[int]bool{}
		for _, x := range samples {
			peak = max(peak, x.rss)
			pids[x.pid] = true
		}
		first, last := samples[0].rss, samples[len(samples)-1].rss
		line := fmt.Sprintf("           %s: %d / %d / %d over %d samples, %d process(es)", in.name, first>>20, last>>20, peak>>20, len(samples), len(pids))
		if peak >= 300<<20 {
			line += "  FAIL: above 300 MB"
			ok = false
		}
		if len(pids) == 1 && len(samples) >= 8 {
			q := len(samples) / 4
			second, lastQ := medianRSS(samples[q:2*q]), medianRSS(samples[len(samples)-q:])
			flat := float64(lastQ) <= float64(second)*1.25+16<<20
			line += fmt.Sprintf("; median %d MB in the second quarter, %d MB in the last: %s", second>>20, lastQ>>20, map[bool]string{true: "flat", false: "FAIL: growing"}[flat])
			ok = ok && flat
		}
		fmt.Fprintln(&b, line)
	}
	return b.String(), ok
}

func medianRSS(samples []rssSample) int64 {
	v := make([]int64, len(samples))
	for i, x := range samples {
		v[i] = x.rss
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// check is one verdict of the summary.
type check struct {
	what string
	ok   bool
}

// countChecks counts in the database as the fault tests do: every logical
// task once, finished once, every purposeful failure retried exactly once.
func (s *soak) countChecks() []check {
	ctx := context.Background()
	count := func(sql string, args ...any) int {
		var n int
		if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			s.problem("count: %v", err)
			return -1
		}
		return n
	}
	typ := s.typ.ID
	created := int(s.created.Load())
	roots := `SELECT id FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL`
	failRoots := count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL AND params->>'fail' = 'true'`, typ)
	eq := func(what string, got, want int) check {
		return check{fmt.Sprintf("%s: %d (want %d)", what, got, want), got == want}
	}
	return []check{
		eq("first attempts in the database, one per unique key answered", count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL`, typ), created),
		eq("unique keys with more than one first attempt", count(`SELECT count(*) FROM (SELECT unique_key FROM worker_tasks WHERE task_type_id = $1
			AND parent_task_id IS NULL GROUP BY unique_key HAVING count(*) > 1) d`, typ), 0),
		eq("soak tasks still pending or in progress", count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status IN ('pending', 'in_progress')`, typ), 0),
		eq("first attempts completed", count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL AND status = 'completed'`, typ), created-failRoots),
		eq("first attempts failed and retried", count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND parent_task_id IS NULL
			AND status = 'failed' AND retry_outcome = 'retried'`, typ), failRoots),
		eq("retries (one per failure)", count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id IN (`+roots+`)`, typ), failRoots),
		eq("retries completed", count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id IN (`+roots+`) AND status = 'completed'`, typ), failRoots),
		eq("task.completed events of soak tasks", count(`SELECT count(*) FROM task_events WHERE type = 'task.completed'
			AND stream_id IN (SELECT id FROM worker_tasks WHERE task_type_id = $1)`, typ), created),
		eq("task.retried events", count(`SELECT count(*) FROM task_events WHERE type = 'task.retried' AND stream_id IN (`+roots+`)`, typ), failRoots),
		eq("tasks with a doubled claim, completion, failure or retry event", count(`SELECT count(*) FROM (SELECT stream_id, type FROM task_events
			WHERE type IN ('task.claimed', 'task.completed', 'task.failed', 'task.retried')
			AND stream_id IN (SELECT id FROM worker_tasks WHERE task_type_id = $1) GROUP BY 1, 2 HAVING count(*) > 1) d`, typ), 0),
		eq("completions counted by the workers", int(s.completed.Load()), created),
	}
}

// metricsChecks scrapes every instance: the request counters' labels stay
// bounded whatever the hostile inputs sent.
func (s *soak) metricsChecks() []check {
	var out []check
	standard := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true,
		"OPTIONS": true, "CONNECT": true, "TRACE": true, "other": true}
	for _, in := range s.ins {
		_, samples := scrape(s.t, in.base)
		series, odd := 0, map[string]bool{}
		for _, x := range samples {
			if strings.HasPrefix(x.name, "taskservice_http_request") {
				series++
				if m := x.labels["method"]; !standard[m] {
					odd[m] = true
				}
			}
		}
		out = append(out, check{fmt.Sprintf("%s: %d HTTP request series, methods outside the standard ones and other: %d", in.name, series, len(odd)),
			len(odd) == 0 && series < 5000})
	}
	return out
}

// replayVerify runs taskctl replay --verify on the soak's database.
func (s *soak) replayVerify() (string, error) { return taskctlReplayVerify(s.t, s.pg.url) }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
