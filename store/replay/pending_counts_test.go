package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// requireBacklogEqualsTasks compares every cell of pending_counts (as
// store.Backlog reads it, the type's pause applied) with a count of
// worker_tasks' open rows, and reports how many tasks each state holds.
func requireBacklogEqualsTasks(t *testing.T, db *store.DB, pool *pgxpool.Pool, step string) map[string]int {
	t.Helper()
	ctx := context.Background()
	got, err := db.Backlog(ctx, pool)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT w.task_type_id, tt.name, w.priority,
	       CASE WHEN w.status = 'blocked' THEN 'blocked' WHEN w.scheduled THEN 'scheduled'
	            WHEN tt.paused THEN 'paused' ELSE 'claimable' END,
	       w.assigned_to IS NOT NULL, count(*)
	  FROM worker_tasks w JOIN task_types tt ON tt.id = w.task_type_id
	 WHERE w.status IN ('pending', 'blocked')
	 GROUP BY 1, 2, 3, 4, 5
	 ORDER BY CASE w.priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END, 2, 1, 4, 5`)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowToStructByPos[store.BacklogCell])
	require.NoError(t, err)
	require.Equal(t, want, got, "pending_counts after %s", step)
	// Every open task has its type's gate (DESIGN §13): a claim can take no
	// task of a paused type.
	require.Zero(t, count(t, pool, `SELECT count(*) FROM worker_tasks w JOIN task_types tt ON tt.id = w.task_type_id
		WHERE w.status IN ('pending', 'blocked', 'in_progress') AND w.gated IS DISTINCT FROM tt.gated`),
		"open tasks whose gate is not their type's after %s", step)
	states := map[string]int{}
	for _, c := range got {
		states[c.State] += c.Tasks
	}
	return states
}

// A random mix of every writer that moves a task in or out of the backlog,
// or between its cells, run concurrently: creations (one, a batch, a
// workflow, with a run_at later, with dependencies, assigned), claims,
// completions (which unblock), failures and retries (with a backoff),
// cancels (which cancel dependents), releases, assignments, a blocked task
// released by hand, pauses and resumes, priority and run_at edits, and the
// due timer. After it every cell of pending_counts equals a count of
// worker_tasks; verify agrees; a damaged cell is reported; a rebuild
// recomputes the cells and they equal the count again.
func TestPendingCountsAfterARandomMixAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 8)
	db := w.db
	backoff, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "backoff", MaxRetries: 5, RetryBackoffSeconds: 1}, w.admin)
	require.NoError(t, err)
	limit := 2
	limited, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "limited", MaxRetries: 1,
		TypeLimits: events.TypeLimits{MaxInProgress: &limit}}, w.admin)
	require.NoError(t, err)
	types := append([]string{backoff.ID, limited.ID}, w.types...)
	prios := []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}

	var mu sync.Mutex
	var ids []string
	remember := func(id string) {
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
	}
	pick := func(rnd *rand.Rand) string {
		mu.Lock()
		defer mu.Unlock()
		if len(ids) == 0 {
			return ""
		}
		return ids[rnd.IntN(len(ids))]
	}
	newParams := func(rnd *rand.Rand) store.NewTaskParams {
		p := store.NewTaskParams{TaskTypeID: types[rnd.IntN(len(types))], NewTaskParams: events.NewTaskParams{
			Title: fmt.Sprintf("mix %d", rnd.IntN(1_000_000)), Params: json.RawMessage(`{}`),
			Priority: prios[rnd.IntN(len(prios))], CreatedBy: w.adminID}}
		if rnd.IntN(6) == 0 {
			p.AssignedTo = w.workers[rnd.IntN(len(w.workers))]
		}
		if rnd.IntN(5) == 0 {
			at := time.Now().Add(time.Duration(rnd.IntN(1500)) * time.Millisecond)
			p.AvailableAt = &at
		}
		if rnd.IntN(4) == 0 {
			for range 1 + rnd.IntN(2) {
				if id := pick(rnd); id != "" {
					p.DependsOn = append(p.DependsOn, id)
				}
			}
			if rnd.IntN(3) == 0 {
				p.OnDependencyFailure = "run"
			}
		}
		return p
	}
	var held sync.Map // task id -> worker
	steps := map[string]int{}
	var stepsMu sync.Mutex
	pauseOrResume := func(rnd *rand.Rand) (string, error) {
		typ := types[rnd.IntN(len(types))]
		_, err := db.UpdateTaskType(ctx, typ, w.admin, func(tt *events.TaskType) ([]events.Payload, error) {
			if tt.Paused {
				return tt.Resume(w.adminID, "")
			}
			return tt.Pause(w.adminID, "hold on")
		})
		return "pause or resume", err
	}
	step := func(rnd *rand.Rand) (string, error) {
		worker := w.workers[rnd.IntN(len(w.workers))]
		wm := w.workerMeta(worker)
		edit := func(id string, e events.TaskEdit) error {
			_, _, err := db.UpdateTask(ctx, pool, id, w.admin, func(t *events.Task) ([]events.Payload, error) { return t.Edit(e) })
			return err
		}
		switch r := rnd.IntN(100); {
		case r < 20:
			tk, err := db.CreateTask(ctx, pool, newParams(rnd), w.admin)
			if err == nil {
				remember(tk.ID)
			}
			return "create", err
		case r < 25:
			ps := make([]store.NewTaskParams, 2+rnd.IntN(6))
			for i := range ps {
				ps[i] = newParams(rnd)
			}
			out, err := db.CreateTasks(ctx, pool, ps, w.admin)
			for _, c := range out {
				if c.Err == nil {
					remember(c.Task.ID)
				}
			}
			return "create batch", err
		case r < 27:
			typ := types[rnd.IntN(len(types))]
			task := func(ref string, deps ...string) store.WorkflowTask {
				return store.WorkflowTask{Ref: ref, DependsOn: deps, Task: store.NewTaskParams{TaskTypeID: typ,
					NewTaskParams: events.NewTaskParams{Title: ref, Params: json.RawMessage(`{}`), Priority: prios[rnd.IntN(len(prios))]}}}
			}
			v, err := db.CreateWorkflow(ctx, fmt.Sprintf("wf %d", rnd.IntN(1_000_000)),
				[]store.WorkflowTask{task("a"), task("b", "a"), task("c", "a", "b")}, w.admin)
			if err == nil {
				for _, tk := range v.Tasks {
					remember(tk.TaskID)
				}
			}
			return "workflow", err
		case r < 45:
			got, err := db.ClaimMany(ctx, worker, 1+rnd.IntN(3), wm)
			for _, tk := range got {
				held.Store(tk.ID, worker)
			}
			return "claim", err
		case r < 60:
			var done string
			held.Range(func(k, v any) bool {
				if v.(string) == worker {
					done = k.(string)
					return rnd.IntN(2) == 0
				}
				return true
			})
			if done == "" {
				return "complete", nil
			}
			held.Delete(done)
			switch rnd.IntN(4) {
			case 0:
				_, _, err := db.UpdateTask(ctx, pool, done, wm, func(t *events.Task) ([]events.Payload, error) {
					return t.Fail(worker, events.FailureError, "broke", nil)
				})
				if err != nil {
					return "fail", err
				}
				retry, err := db.CreateRetry(ctx, pool, done, store.RetryParams{Meta: events.Meta{Actor: events.System("retry")}})
				if err == nil {
					remember(retry.ID)
				}
				return "fail and retry", err
			case 1:
				_, _, err := db.UpdateTask(ctx, pool, done, wm, func(t *events.Task) ([]events.Payload, error) {
					return t.Release(worker, "later")
				})
				return "release", err
			case 2:
				outs, err := db.FinishTasks(ctx, worker, []store.Finish{{ID: done, Status: events.StatusCompleted}}, wm)
				if err == nil && outs[0].Err != nil {
					err = outs[0].Err
				}
				return "finish", err
			}
			_, _, err := db.CompleteTask(ctx, done, worker, wm)
			return "complete", err
		case r < 66:
			_, _, err := db.UpdateTask(ctx, pool, pick(rnd), w.admin, func(t *events.Task) ([]events.Payload, error) {
				return t.Cancel(w.adminID, "not needed")
			})
			return "cancel", err
		case r < 71:
			_, err := db.AssignTask(ctx, pool, pick(rnd), worker, "best fit", w.admin)
			return "assign", err
		case r < 77:
			p := prios[rnd.IntN(len(prios))]
			return "priority edit", edit(pick(rnd), events.TaskEdit{Priority: &p})
		case r < 80:
			at := time.Now().Add(time.Duration(rnd.IntN(1000)) * time.Millisecond)
			return "run_at edit", edit(pick(rnd), events.TaskEdit{RunAt: &at})
		case r < 84:
			_, err := db.ReleaseBlocked(ctx, pool, pick(rnd), "go ahead", w.admin)
			return "release blocked", err
		default:
			_, err := db.MakeDue(ctx, 20)
			return "due", err
		}
	}
	// Pauses and resumes run among the other writers: a claim or a release
	// that moves a task while its type's regate waits for the row must not
	// leave it with the old gate (ADR 031).
	serialStep := func(rnd *rand.Rand) (string, error) {
		if rnd.IntN(100) < 4 {
			return pauseOrResume(rnd)
		}
		return step(rnd)
	}
	run := func(seed uint64, n int) error {
		rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b9))
		for range n {
			op, err := serialStep(rnd)
			if err != nil && !refusedErr(err) {
				return fmt.Errorf("%s: %w", op, err)
			}
			if err == nil {
				stepsMu.Lock()
				steps[op]++
				stepsMu.Unlock()
			}
		}
		return nil
	}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := range 6 {
			wg.Go(func() { errs <- run(uint64(round*100+i+1), 250) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		requireBacklogEqualsTasks(t, db, pool, fmt.Sprintf("round %d", round))
	}
	t.Logf("steps done: %v", steps)
	for _, op := range []string{"create", "create batch", "workflow", "claim", "complete", "finish", "fail and retry", "release",
		"cancel", "assign", "priority edit", "run_at edit", "release blocked", "pause or resume", "due"} {
		require.Positive(t, steps[op], "%s never succeeded: the mix does not cover it", op)
	}
	require.Positive(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = 'task.unblocked'`), "a completion unblocked a task")
	require.Positive(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = 'task.due'`), "the due timer moved a task")
	require.Positive(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = 'task.cancelled' AND data->>'by' = 'dependencies'`),
		"a cancel cancelled a dependent")

	// Leave one type paused and everything else as it stands, then check
	// each state is there to count.
	_, err = db.UpdateTaskType(ctx, backoff.ID, w.admin, func(tt *events.TaskType) ([]events.Payload, error) {
		if tt.Paused {
			return nil, nil
		}
		return tt.Pause(w.adminID, "hold on")
	})
	require.NoError(t, err)
	// And one type running, whatever the mix's pauses left: its "now" task
	// is the claimable one.
	_, err = db.UpdateTaskType(ctx, w.types[0], w.admin, func(tt *events.TaskType) ([]events.Payload, error) {
		if !tt.Paused {
			return nil, nil
		}
		return tt.Resume(w.adminID, "")
	})
	require.NoError(t, err)
	later := time.Now().Add(time.Hour)
	for _, typ := range []string{backoff.ID, w.types[0]} {
		_, err := db.CreateTask(ctx, pool, store.NewTaskParams{TaskTypeID: typ, NewTaskParams: events.NewTaskParams{
			Title: "later", Params: json.RawMessage(`{}`), Priority: events.PriorityLow, AvailableAt: &later}}, w.admin)
		require.NoError(t, err)
		_, err = db.CreateTask(ctx, pool, store.NewTaskParams{TaskTypeID: typ, NewTaskParams: events.NewTaskParams{
			Title: "now", Params: json.RawMessage(`{}`), Priority: events.PriorityLow}}, w.admin)
		require.NoError(t, err)
	}
	states := requireBacklogEqualsTasks(t, db, pool, "the mix")
	for _, s := range []string{store.BacklogClaimable, store.BacklogPaused, store.BacklogScheduled} {
		require.Positive(t, states[s], "no task is %s: %v", s, states)
	}

	if rep := verify(t, pool); !rep.Clean() {
		for _, d := range rep.Differences {
			id := d.Key[3:]
			rows, _ := pool.Query(ctx, `SELECT seq, type, data::text, occurred_at FROM task_events WHERE stream_id = $1 ORDER BY version`, id)
			for rows.Next() {
				var seq int64
				var typ, data string
				var at time.Time
				_ = rows.Scan(&seq, &typ, &data, &at)
				t.Logf("%d %s %s %s", seq, typ, data, at.Format(time.RFC3339Nano))
			}
			var st, tt string
			var g bool
			_ = pool.QueryRow(ctx, `SELECT status, task_type_id::text, gated FROM worker_tasks WHERE id = $1`, id).Scan(&st, &tt, &g)
			t.Logf("task %s status %s type %s gated %v", id, st, tt, g)
			rows, _ = pool.Query(ctx, `SELECT seq, type, data::text, occurred_at FROM task_events WHERE stream_id = $1 ORDER BY version`, tt)
			for rows.Next() {
				var seq int64
				var typ, data string
				var at time.Time
				_ = rows.Scan(&seq, &typ, &data, &at)
				t.Logf("type %d %s %s %s", seq, typ, data, at.Format(time.RFC3339Nano))
			}
		}
		t.FailNow()
	}
	// A damaged cell is reported as such.
	_, err = pool.Exec(ctx, `UPDATE pending_counts SET tasks = tasks + 5 WHERE (pid, task_type_id, priority, state, assigned) =
		(SELECT pid, task_type_id, priority, state, assigned FROM pending_counts ORDER BY tasks DESC LIMIT 1)`)
	require.NoError(t, err)
	rep := verify(t, pool)
	require.False(t, rep.Clean())
	require.Len(t, rep.Differences, 1, "%+v", rep.Differences)
	require.Equal(t, "pending_counts", rep.Differences[0].Table)
	require.Equal(t, []string{"tasks"}, rep.Differences[0].Changed)

	// The rebuild writes the cells from the fold, while writers go on.
	writers, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		rnd := rand.New(rand.NewPCG(77, 78))
		for writers.Err() == nil {
			if _, err := serialStep(rnd); err != nil && !refusedErr(err) && writers.Err() == nil {
				t.Errorf("writer during the rebuild: %v", err)
				return
			}
		}
	})
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	stop()
	wg.Wait()
	require.NoError(t, err)
	requireBacklogEqualsTasks(t, db, pool, "the rebuild")
	requireClean(t, verify(t, pool))
	// And the writers keep them on the swapped table.
	require.NoError(t, run(999, 200))
	requireBacklogEqualsTasks(t, db, pool, "writes after the rebuild")
	requireClean(t, verify(t, pool))
}
