package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

const (
	concurrentWorkers = 64
	concurrentTasks   = 5000
)

// TestConcurrentClaims runs 64 workers, each its own goroutine and its own
// logged-in client, against 5,000 tasks through HTTP. A worker claims until
// the server says null (at its limit, or nothing left), then completes what
// it holds, and starts over. The test counts what each worker holds between
// claim and complete, and checks the log afterwards.
//
// Not parallel: it wants the machine to itself.
func TestConcurrentClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("64 workers x 5,000 tasks; skipped with -short")
	}
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	tt := b.newType(t, "bulk")

	// Tasks go in through the store: the HTTP path under test is the claim
	// and the completion. Priorities are mixed so the queue order matters.
	prios := []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}
	var g errgroup.Group
	g.SetLimit(8)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: b.adminID}}
	for i := range concurrentTasks {
		g.Go(func() error {
			_, err := b.db.CreateTask(ctx, b.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
				Title: fmt.Sprintf("bulk %d", i), Priority: prios[i%len(prios)], Params: json.RawMessage(`{"days":1}`), CreatedBy: b.adminID,
			}}, meta)
			return err
		})
	}
	require.NoError(t, g.Wait())

	workers := make([]*worker, concurrentWorkers)
	for i := range workers {
		workers[i] = b.newWorker(t, fmt.Sprintf("Bulk%02d", i), 1+i%3)
	}

	var (
		claimedBy sync.Map // task id -> worker id
		held      = make([]atomic.Int32, len(workers))
		peak      = make([]atomic.Int32, len(workers))
		completed atomic.Int32
	)
	run := func(i int) error {
		w := workers[i]
		var mine []string
		for {
			got, err := w.Claim(ctx)
			if err != nil {
				return fmt.Errorf("%s: claim: %w", w.Email, err)
			}
			if got != nil {
				if prev, dup := claimedBy.LoadOrStore(got.ID, w.ID); dup {
					return fmt.Errorf("task %s claimed by %s and again by %s", got.ID, prev, w.ID)
				}
				n := held[i].Add(1)
				if n > peak[i].Load() {
					peak[i].Store(n)
				}
				if int(n) > w.Limit {
					return fmt.Errorf("%s holds %d tasks, limit %d", w.Email, n, w.Limit)
				}
				mine = append(mine, got.ID)
				continue
			}
			// Null: at the limit, or nothing claimable. Finish what is held.
			for _, id := range mine {
				task, err := w.Complete(ctx, id)
				if err != nil {
					return fmt.Errorf("%s: complete %s: %w", w.Email, id, err)
				}
				if task.Status != events.StatusCompleted {
					return fmt.Errorf("%s: completed %s is %s", w.Email, id, task.Status)
				}
				held[i].Add(-1)
				completed.Add(1)
			}
			if len(mine) > 0 {
				mine = mine[:0]
				continue
			}
			// Holding nothing and still null: the queue may be empty, or every
			// pending row may be locked by claims in flight. Stop only when no
			// task is pending.
			var pending int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE status = 'pending'`).Scan(&pending); err != nil {
				return err
			}
			if pending == 0 {
				return nil
			}
		}
	}
	g = errgroup.Group{}
	for i := range workers {
		g.Go(func() error {
			err := run(i)
			if err != nil {
				cancel()
			}
			return err
		})
	}
	require.NoError(t, g.Wait())
	require.EqualValues(t, concurrentTasks, completed.Load())

	// Every worker with a limit above one held more than one task at some
	// point: the limit was exercised, not just never reached.
	usedLimit := 0
	for i, w := range workers {
		require.LessOrEqual(t, int(peak[i].Load()), w.Limit)
		if int(peak[i].Load()) == w.Limit {
			usedLimit++
		}
	}
	require.Greater(t, usedLimit, len(workers)/2, "most workers should have reached their limit")

	// The log: every task claimed exactly once and completed.
	var tasks, claimedOnce, completedTasks int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM worker_tasks),
		(SELECT count(*) FROM (SELECT stream_id FROM task_events WHERE type = 'task.claimed'
			GROUP BY stream_id HAVING count(*) = 1) x),
		(SELECT count(*) FROM worker_tasks WHERE status = 'completed')`).Scan(&tasks, &claimedOnce, &completedTasks))
	require.Equal(t, concurrentTasks, tasks)
	require.Equal(t, concurrentTasks, claimedOnce, "tasks with exactly one task.claimed")
	require.Equal(t, concurrentTasks, completedTasks)

	counts := map[string]int{}
	rows, err := b.pool.Query(ctx, `SELECT type, count(*) FROM task_events WHERE stream_type = 'task' GROUP BY type`)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		var n int
		require.NoError(t, rows.Scan(&typ, &n))
		counts[typ] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"task.created": concurrentTasks, "task.claimed": concurrentTasks, "task.completed": concurrentTasks}, counts)

	// No worker ever held more than its limit, as the log tells it: walk each
	// worker's claims (+1) and completions (-1) in occurred_at order (seq
	// breaks ties) and take the running maximum.
	rows, err = b.pool.Query(ctx, `WITH steps AS (
		SELECT (e.data->>'worker_id')::uuid AS worker, e.occurred_at, e.seq,
		       CASE e.type WHEN 'task.claimed' THEN 1 ELSE -1 END AS delta
		  FROM task_events e WHERE e.type IN ('task.claimed', 'task.completed')
	), running AS (
		SELECT worker, sum(delta) OVER (PARTITION BY worker ORDER BY occurred_at, seq
		                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS holding
		  FROM steps
	)
	SELECT u.id::text, u.max_concurrent_tasks, max(r.holding), min(r.holding)
	  FROM running r JOIN users u ON u.id = r.worker GROUP BY u.id, u.max_concurrent_tasks`)
	require.NoError(t, err)
	seen := 0
	for rows.Next() {
		var id string
		var limit, most, least int
		require.NoError(t, rows.Scan(&id, &limit, &most, &least))
		require.LessOrEqual(t, most, limit, "worker %s held %d tasks at once by the log, limit %d", id, most, limit)
		require.GreaterOrEqual(t, least, 0, "worker %s completed a task before claiming it, by the log", id)
		seen++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(workers), seen, "every worker claimed something")

	// A sample of rows equals the fold of its events.
	rows, err = b.pool.Query(ctx, `SELECT id::text FROM worker_tasks ORDER BY random() LIMIT 50`)
	require.NoError(t, err)
	var sample []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		sample = append(sample, id)
	}
	require.NoError(t, rows.Err())
	for _, id := range sample {
		folded, _ := b.fold(t, id)
		row, err := b.db.GetTask(ctx, b.pool, id)
		require.NoError(t, err)
		require.Equal(t, *folded, *row)
	}
}
