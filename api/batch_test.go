package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// queueKey is a task's place in the pool: priority, then age, then id.
type queueKey struct {
	rank int
	at   time.Time
	id   string
}

func (a queueKey) less(b queueKey) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.id < b.id
}

func keyOf(t *events.Task) queueKey {
	return queueKey{rank: t.Priority.Rank(), at: t.CreatedAt, id: t.ID}
}

// TestClaimManyConcurrent runs 64 workers through the batched lane: each
// claims up to a random number of tasks (often more than its free slots),
// then reports them all finished in one request, until the queue is empty.
// No task may be claimed twice, no worker may hold more than its limit, each
// answer must be in claim order, and the batches must take the queue in
// order: every task a claim statement took comes after every task an
// earlier statement took (priority, then FIFO).
func TestClaimManyConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("64 workers x 3,000 tasks; skipped with -short")
	}
	const workersN, tasksN = 64, 3000
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	tt := b.newType(t, "bulk")
	prios := []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}
	var g errgroup.Group
	g.SetLimit(8)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: b.adminID}}
	for i := range tasksN {
		g.Go(func() error {
			_, err := b.db.CreateTask(ctx, b.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
				Title: fmt.Sprintf("bulk %d", i), Priority: prios[i%len(prios)], Params: json.RawMessage(`{"days":1}`), CreatedBy: b.adminID,
			}}, meta)
			return err
		})
	}
	require.NoError(t, g.Wait())

	workers := make([]*worker, workersN)
	for i := range workers {
		workers[i] = b.newWorker(t, fmt.Sprintf("Batch%02d", i), 1+i%12)
	}
	var (
		claimedBy sync.Map // task id -> worker id
		finished  atomic.Int32
		fullAsks  atomic.Int32 // answers that filled every free slot asked for
	)
	run := func(i int) error {
		w := workers[i]
		for round := 0; ; round++ {
			max := 1 + (i*7+round*13)%(w.Limit+3) // sometimes more than the free slots
			got, err := w.ClaimMany(ctx, max, 0)
			if err != nil {
				return fmt.Errorf("%s: claim %d: %w", w.Email, max, err)
			}
			if len(got) > w.Limit || len(got) > max {
				return fmt.Errorf("%s asked for %d, limit %d, got %d", w.Email, max, w.Limit, len(got))
			}
			if len(got) == min(max, w.Limit) {
				fullAsks.Add(1)
			}
			items := make([]client.Finish, len(got))
			for j, task := range got {
				if prev, dup := claimedBy.LoadOrStore(task.ID, w.ID); dup {
					return fmt.Errorf("task %s claimed by %s and again by %s", task.ID, prev, w.ID)
				}
				if task.TaskType == nil || task.TaskType.ID != tt.ID {
					return fmt.Errorf("task %s came without its type", task.ID)
				}
				if j > 0 && keyOf(&task.Task).less(keyOf(&got[j-1].Task)) {
					return fmt.Errorf("%s: answer not in claim order at %d", w.Email, j)
				}
				items[j] = client.Finish{ID: task.ID, Status: events.StatusCompleted}
			}
			if len(got) == 0 {
				var pending int
				if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE status = 'pending'`).Scan(&pending); err != nil {
					return err
				}
				if pending == 0 {
					return nil
				}
				continue
			}
			res, err := w.FinishMany(ctx, items)
			if err != nil {
				return fmt.Errorf("%s: finish %d: %w", w.Email, len(items), err)
			}
			for j, r := range res {
				if r.ID != items[j].ID || !r.Success || r.Status != 200 {
					return fmt.Errorf("%s: item %d of finish: %+v", w.Email, j, r)
				}
			}
			finished.Add(int32(len(res)))
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
	require.EqualValues(t, tasksN, finished.Load())
	require.Positive(t, fullAsks.Load())

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
	require.Equal(t, map[string]int{"task.created": tasksN, "task.claimed": tasksN, "task.completed": tasksN}, counts)

	// By the log: no worker ever held more than its limit.
	var over int
	require.NoError(t, b.pool.QueryRow(ctx, `WITH steps AS (
		SELECT (e.data->>'worker_id')::uuid AS worker, e.tx_id, e.seq,
		       CASE e.type WHEN 'task.claimed' THEN 1 ELSE -1 END AS delta
		  FROM task_events e WHERE e.type IN ('task.claimed', 'task.completed')
	), running AS (
		SELECT worker, sum(delta) OVER (PARTITION BY worker ORDER BY tx_id, seq) AS holding FROM steps
	)
	SELECT count(*) FROM running r JOIN users u ON u.id = r.worker WHERE r.holding > u.max_concurrent_tasks OR r.holding < 0`).Scan(&over))
	require.Zero(t, over, "log steps where a worker held more than its limit (or less than nothing)")

	// Across batches: each claim statement (one transaction) took tasks that
	// all come after every task of the statements before it.
	rows, err = b.pool.Query(ctx, `SELECT e.tx_id::text, w.priority, w.created_at, w.id::text
		  FROM task_events e JOIN worker_tasks w ON w.id = e.stream_id
		 WHERE e.type = 'task.claimed' ORDER BY e.tx_id, e.seq`)
	require.NoError(t, err)
	var (
		prevTx            string
		prevMax, batchMax queueKey
		batches           int
	)
	for rows.Next() {
		var tx string
		var p events.Priority
		var k queueKey
		require.NoError(t, rows.Scan(&tx, &p, &k.at, &k.id))
		k.rank = p.Rank()
		if tx != prevTx {
			if batches > 0 {
				prevMax = batchMax
			}
			batches++
			prevTx, batchMax = tx, k
		}
		if batches > 1 {
			require.True(t, prevMax.less(k), "task %s (%s) claimed in a later batch than a task after it in the queue", k.id, p)
		}
		if batchMax.less(k) {
			batchMax = k
		}
	}
	require.NoError(t, rows.Err())
	require.Greater(t, batches, 1)
}

// TestFinishManyMixedItems sends good and bad items in one request: each is
// answered on its own, in order, and only the good ones change, with exactly
// the events the single calls append.
func TestFinishManyMixedItems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "mixed")
	w := b.newWorker(t, "Mixer", 10)
	var ids []string
	for i := range 6 {
		ids = append(ids, b.newTask(t, tt, fmt.Sprintf("task %d", i), events.PriorityMedium, "").ID)
	}
	got, err := w.ClaimMany(b.ctx, 100, 0)
	require.NoError(t, err)
	require.Len(t, got, 6, "all six, no more than asked and exist")
	for i, task := range got {
		require.Equal(t, ids[i], task.ID, "FIFO within one priority")
		require.Equal(t, events.StatusInProgress, task.Status)
	}
	// ids[3] is already completed, ids[4] cancelled by an admin meanwhile.
	_, err = w.Complete(b.ctx, ids[3])
	require.NoError(t, err)
	_, err = b.admin.CancelTask(b.ctx, ids[4], "not needed after all")
	require.NoError(t, err)
	unknown := "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a"

	eventsBefore := b.eventCounts(t)
	res, err := w.FinishMany(b.ctx, []client.Finish{
		{ID: ids[0], Status: events.StatusCompleted},
		{ID: ids[3], Status: events.StatusCompleted},
		{ID: ids[1], Status: events.StatusCompleted, Result: json.RawMessage(`{"posts":3}`)},
		{ID: unknown, Status: events.StatusCompleted},
		{ID: ids[2], Status: events.StatusFailed, Kind: events.FailureTimeout, Reason: "took too long"},
		{ID: ids[4], Status: events.StatusFailed, Reason: "gave up"},
		{ID: ids[5], Status: events.StatusFailed},
	})
	require.NoError(t, err)
	require.Len(t, res, 7)
	want := []struct {
		id     string
		status int
		code   string
	}{{ids[0], 200, ""}, {ids[3], 409, "invalid_transition"}, {ids[1], 200, ""}, {unknown, 404, "not_found"},
		{ids[2], 200, ""}, {ids[4], 409, "invalid_transition"}, {ids[5], 200, ""}}
	for i, wnt := range want {
		r := res[i]
		require.Equal(t, wnt.id, r.ID, "item %d", i)
		require.Equal(t, wnt.status, r.Status, "item %d: %+v", i, r.Error)
		require.Equal(t, wnt.code == "", r.Success, "item %d", i)
		if wnt.code != "" {
			require.Equal(t, wnt.code, r.Error.Code, "item %d", i)
		} else {
			require.Nil(t, r.Error)
		}
	}
	task := func(id string) *events.Task {
		tk, err := b.db.GetTask(b.ctx, b.pool, id)
		require.NoError(t, err)
		return tk
	}
	require.Equal(t, events.StatusCompleted, task(ids[0]).Status)
	require.Equal(t, events.StatusCompleted, task(ids[1]).Status)
	require.JSONEq(t, `{"posts":3}`, string(task(ids[1]).Result))
	require.Equal(t, events.StatusFailed, task(ids[2]).Status)
	require.Equal(t, events.FailureTimeout, *task(ids[2]).FailureKind)
	require.Equal(t, "took too long", *task(ids[2]).FailureReason)
	require.Equal(t, events.StatusCancelled, task(ids[4]).Status)
	require.Equal(t, events.FailureError, *task(ids[5]).FailureKind)

	after := b.eventCounts(t)
	require.Equal(t, map[string]int{"task.completed": 2, "task.result_posted": 1, "task.failed": 2}, diffCounts(eventsBefore, after),
		"exactly the events of the single calls")
	for _, id := range ids {
		b.requireProjectionIsFold(t, id)
	}
	_, evs := b.fold(t, ids[1])
	require.Equal(t, "task.result_posted", evs[len(evs)-2].Type, "the result comes before the completion")
	require.Equal(t, "task.completed", evs[len(evs)-1].Type)
}

// TestClaimManyWaits holds a claim-many until a task is created, and
// answers an empty list when none comes.
func TestClaimManyWaits(t *testing.T) {
	t.Parallel()
	b := setupHub(t)
	tt := b.newType(t, "later")
	w := b.newWorker(t, "Patient", 3)

	start := time.Now()
	got, err := w.ClaimMany(b.ctx, 3, time.Second)
	require.NoError(t, err)
	require.Empty(t, got)
	require.GreaterOrEqual(t, time.Since(start), time.Second)

	done := make(chan []*store.TaskWithType, 1)
	go func() {
		got, err := w.ClaimMany(b.ctx, 3, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	time.Sleep(100 * time.Millisecond)
	task := b.newTask(t, tt, "arrives", events.PriorityHigh, "")
	select {
	case got := <-done:
		require.Len(t, got, 1)
		require.Equal(t, task.ID, got[0].ID)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting claim did not get the new task")
	}
}

// eventCounts counts task events by type.
func (b *bundle) eventCounts(t *testing.T) map[string]int {
	t.Helper()
	counts := map[string]int{}
	rows, err := b.pool.Query(b.ctx, `SELECT type, count(*) FROM task_events GROUP BY type`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var typ string
		var n int
		require.NoError(t, rows.Scan(&typ, &n))
		counts[typ] = n
	}
	require.NoError(t, rows.Err())
	return counts
}

func diffCounts(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}
