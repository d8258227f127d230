package main_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/replay"
)

// Queue controls across three real instances (DESIGN §13).

// longPollers starts n workers spread over the instances; each long-polls
// for up to max tasks at a time and completes what it gets at once,
// calling got (with the time the answer arrived) for every task. They stop
// when ctx ends; the returned function waits for them.
func (c *cluster) longPollers(ctx context.Context, prefix string, n, max int, got func(id string, at time.Time)) func() {
	c.t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		w := c.worker(fmt.Sprintf("%s%d", prefix, i), max)
		cl := w.clients[i%len(w.clients)]
		wg.Go(func() {
			for ctx.Err() == nil {
				tasks, err := cl.ClaimMany(ctx, max, 30*time.Second)
				at := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						c.t.Errorf("worker %d: claim: %v", i, err)
					}
					return
				}
				var done []client.Finish
				for _, task := range tasks {
					got(task.ID, at)
					done = append(done, client.Finish{ID: task.ID, Status: "completed"})
				}
				if len(done) > 0 {
					if _, err := cl.FinishMany(context.WithoutCancel(ctx), done); err != nil {
						c.t.Errorf("worker %d: finish: %v", i, err)
						return
					}
				}
			}
		})
	}
	return wg.Wait
}

// run_at: 200 tasks due over four seconds, four at a time, while 12 workers
// long-poll across three instances. Only the instances' timers wake them
// when a run_at comes (the catch-up ticks are 30 s away, and nothing else
// commits but the workers' own completions). Each task reaches a worker
// after its run_at, and soon after it.
func TestRunAtAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers")
	}
	t.Parallel()
	c := newCluster(t, 3, "REACTOR_CATCH_UP=30s", "SCHEDULER_CATCH_UP=30s")
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "later", Label: "Later"})
	require.NoError(t, err)

	const tasks = 200
	// One batch request: 200 concurrent creations took longer than the
	// lead time under a load average of 40.
	start := time.Now().Add(5 * time.Second)
	batch := make([]client.NewTask, tasks)
	for i := range batch {
		at := start.Add(time.Duration(i/4) * 80 * time.Millisecond).UTC()
		batch[i] = client.NewTask{Title: fmt.Sprintf("later %d", i), TaskTypeID: tt.ID, RunAt: at.Format(time.RFC3339Nano)}
	}
	created, err := c.admin.CreateTasks(c.ctx, batch)
	require.NoError(t, err)
	require.Equal(t, tasks, created.Created)
	require.True(t, time.Now().Before(start), "creating the tasks took too long for this test's start time")
	runAt := map[string]time.Time{}
	var mu sync.Mutex
	for i, it := range created.Items {
		runAt[it.ID] = start.Add(time.Duration(i/4) * 80 * time.Millisecond).UTC()
	}
	stats, err := c.admin.Stats(c.ctx)
	require.NoError(t, err)
	require.EqualValues(t, tasks, stats["scheduled"])
	require.EqualValues(t, 0, stats["queue_depth"])

	ctx, cancel := context.WithCancel(c.ctx)
	late := map[string]time.Duration{}
	wait := c.longPollers(ctx, "later", 12, 5, func(id string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		late[id] = at.Sub(runAt[id])
	})
	c.eventually("every task claimed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(late) == tasks
	})
	cancel()
	wait()

	lateness := make([]time.Duration, 0, tasks)
	for id, d := range late {
		require.Positive(t, d, "task %s reached a worker before its run_at", id)
		lateness = append(lateness, d)
	}
	slices.Sort(lateness)
	p50, p99 := lateness[tasks/2], lateness[tasks*99/100-1]
	// From the log: never claimed before run_at, each made due once.
	require.Zero(t, c.count(`SELECT count(*) FROM task_events e JOIN worker_tasks w ON w.id = e.stream_id
		WHERE e.type = 'task.claimed' AND e.occurred_at < w.available_at`))
	require.Equal(t, tasks, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.due'`))
	require.Zero(t, c.count(`SELECT count(*) FROM (SELECT stream_id FROM task_events WHERE type = 'task.due'
		GROUP BY 1 HAVING count(*) > 1) d`))
	var dueP99, claimP99 float64
	require.NoError(t, c.pool.QueryRow(c.ctx, `SELECT
	        percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM d.occurred_at - w.available_at)),
	        percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM cl.occurred_at - w.available_at))
	    FROM worker_tasks w JOIN task_events d ON d.stream_id = w.id AND d.type = 'task.due'
	    JOIN task_events cl ON cl.stream_id = w.id AND cl.type = 'task.claimed'`).Scan(&dueP99, &claimP99))
	t.Logf("run_at -> worker: p50 %.1f ms, p99 %.1f ms, max %.1f ms; run_at -> task.due p99 %.1f ms, -> task.claimed p99 %.1f ms",
		ms(p50), ms(p99), ms(lateness[tasks-1]), dueP99*1000, claimP99*1000)
	// Speed is for benchmarks (DESIGN §8), and this machine's load varies
	// (a load average of 50 on two cores made p99 3 s once); the bound only
	// tells a timer's wake (milliseconds when quiet, 50 ms asked) from the
	// catch-up tick's 30 s. The figures above are logged.
	require.Less(t, p99, 10*time.Second, "p99 from run_at to the worker")

	rep, err := replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify: %+v", rep.Differences)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Pause: while a type is paused, 12 workers long-polling across three
// instances never claim its tasks (those created before the pause, during
// it and after it), though they take every other task. Its tasks stay
// pending, and none is left ungated by a creation racing the pause. Resume
// through another instance: the waiting workers get them at once, woken by
// the resume's commit (the catch-up ticks are 30 s away).
func TestPauseAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers")
	}
	t.Parallel()
	c := newCluster(t, 3, "REACTOR_CATCH_UP=30s", "SCHEDULER_CATCH_UP=30s")
	crawl, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crawl", Label: "Crawl"})
	require.NoError(t, err)
	other, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "other", Label: "Other"})
	require.NoError(t, err)
	create := func(tt string, n int, tag string) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: fmt.Sprintf("%s %d", tag, i), TaskTypeID: tt})
				require.NoError(t, err)
			})
		}
		wg.Wait()
	}
	create(crawl.ID, 20, "before")
	// Creations race the pause: whichever commits first, each task ends up gated.
	racing := make(chan struct{})
	go func() { defer close(racing); create(crawl.ID, 20, "racing") }()
	paused, err := c.admin.PauseTaskType(c.ctx, crawl.ID, "Reddit API returns 429")
	require.NoError(t, err)
	require.True(t, paused.Paused)
	<-racing
	create(crawl.ID, 20, "after")
	create(other.ID, 30, "other")
	require.Zero(t, c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND NOT gated`, crawl.ID),
		"a task of the paused type is in the claim's indexes")

	ctx, cancel := context.WithCancel(c.ctx)
	var mu sync.Mutex
	got := map[string]time.Time{}
	wait := c.longPollers(ctx, "pauser", 12, 3, func(id string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		got[id] = at
	})
	c.eventually("every task of the other type done", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status = 'completed'`, other.ID) == 30
	})
	time.Sleep(time.Second) // the workers wait on, with the paused type's tasks in the table
	require.Zero(t, c.count(`SELECT count(*) FROM task_events e JOIN worker_tasks w ON w.id = e.stream_id
		WHERE e.type = 'task.claimed' AND w.task_type_id = $1`, crawl.ID), "a paused type's task was claimed")
	require.Equal(t, 60, c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status = 'pending'`, crawl.ID))
	rep, err := replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify while paused: %+v", rep.Differences)

	resumer := client.New(c.ins[2].base, c.hc)
	resumer.SetToken(c.admin.Token())
	_, err = resumer.ResumeTaskType(c.ctx, crawl.ID, "limit reset")
	require.NoError(t, err)
	resumed := time.Now()
	c.eventually("every task of the resumed type done", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status = 'completed'`, crawl.ID) == 60
	})
	cancel()
	wait()

	var first time.Time
	for id, at := range got {
		if c.count(`SELECT count(*) FROM worker_tasks WHERE id = $1 AND task_type_id = $2`, id, crawl.ID) == 1 &&
			(first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	var fromCommit float64
	require.NoError(t, c.pool.QueryRow(c.ctx, `SELECT extract(epoch FROM min(cl.occurred_at) - max(r.occurred_at))
		FROM task_events r, task_events cl JOIN worker_tasks w ON w.id = cl.stream_id
		WHERE r.type = 'task_type.resumed' AND r.stream_id = $1 AND cl.type = 'task.claimed' AND w.task_type_id = $1`,
		crawl.ID).Scan(&fromCommit))
	t.Logf("resume -> first claim of its tasks: %.1f ms from the commit (log), %.1f ms from the answer to the worker",
		fromCommit*1000, ms(first.Sub(resumed)))
	require.Positive(t, fromCommit, "a task was claimed before the resume")
	require.Less(t, first.Sub(resumed), 10*time.Second, "the resume woke the waiting workers")

	rep, err = replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify: %+v", rep.Differences)
}
