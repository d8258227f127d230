package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// workload drives the real write path (package store, as the API and the
// reactors do) with random commands: tasks created, assigned, claimed,
// released, updated, given results, completed, failed by workers and by the
// system, retried (or not), cancelled and edited; workers going offline and
// back; a type updated. Commands the state machine refuses are part of the
// game and are counted, not failed.
type workload struct {
	db      *store.DB
	admin   events.Meta
	adminID string
	workers []string
	types   []string

	mu    sync.Mutex
	tasks []string

	done, refused atomic.Int64
}

func newWorkload(t *testing.T, pool *pgxpool.Pool, workers int) *workload {
	t.Helper()
	ctx := context.Background()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	w := &workload{db: db}
	admin, err := db.CreateUser(ctx, events.UserRegistered{Email: "ada@example.com", FullName: "Ada Admin", IsAdmin: true},
		"admin-password", "x", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	w.adminID = admin.ID
	w.admin = events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: admin.ID}}
	for i := range workers {
		u, err := db.CreateUser(ctx, events.UserRegistered{Email: fmt.Sprintf("w%d@example.com", i), FullName: fmt.Sprintf("Worker %d", i),
			IsWorker: true, MaxConcurrentTasks: 1 + i%3}, "worker-password", "x", w.admin)
		require.NoError(t, err)
		_, err = db.Heartbeat(ctx, u.ID, store.HeartbeatParams{Status: "idle"}, w.workerMeta(u.ID))
		require.NoError(t, err)
		w.workers = append(w.workers, u.ID)
	}
	for i, name := range []string{"code_review", "crawl", "report"} {
		tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: name, SOP: "Do it well.", MaxRetries: i + 1}, w.admin)
		require.NoError(t, err)
		w.types = append(w.types, tt.ID)
	}
	return w
}

func (w *workload) workerMeta(id string) events.Meta {
	return events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: id}}
}

func (w *workload) task(rnd *rand.Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.tasks) == 0 {
		return ""
	}
	return w.tasks[rnd.IntN(len(w.tasks))]
}

// refusedErr reports errors the domain is expected to return to random
// commands.
func refusedErr(err error) bool {
	for _, e := range []error{events.ErrInvalidTransition, events.ErrForbidden, events.ErrConflict,
		events.ErrInvalid, events.ErrNotFound, events.ErrAtCapacity} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// run performs n random commands; it returns the first unexpected error.
func (w *workload) run(ctx context.Context, seed uint64, n int) error {
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	for range n {
		if ctx.Err() != nil {
			return nil
		}
		err := w.step(ctx, rnd)
		switch {
		case err == nil:
			w.done.Add(1)
		case refusedErr(err):
			w.refused.Add(1)
		case ctx.Err() != nil:
			return nil
		default:
			return err
		}
	}
	return nil
}

func (w *workload) step(ctx context.Context, rnd *rand.Rand) (err error) {
	op := ""
	defer func() {
		if err != nil && !refusedErr(err) {
			err = fmt.Errorf("%s: %w", op, err)
		}
	}()
	db := w.db
	worker := w.workers[rnd.IntN(len(w.workers))]
	wm := w.workerMeta(worker)
	update := func(id, author string, meta events.Meta, byWorker bool) error {
		_, _, err := db.UpdateTask(ctx, db.Pool(), id, meta, func(t *events.Task) ([]events.Payload, error) {
			return t.PostUpdate(uuid.NewString(), author, fmt.Sprintf("progress note %d", rnd.IntN(1000)), byWorker)
		})
		return err
	}
	switch r := rnd.IntN(100); {
	case r < 25: // create
		op = "create"
		p := store.NewTaskParams{TaskTypeID: w.types[rnd.IntN(len(w.types))], NewTaskParams: events.NewTaskParams{
			Title: fmt.Sprintf("task %d", rnd.IntN(1_000_000)), Description: "random workload",
			Params:    json.RawMessage(fmt.Sprintf(`{"n": %d}`, rnd.IntN(100))),
			Priority:  []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}[rnd.IntN(4)],
			CreatedBy: w.adminID,
		}}
		if rnd.IntN(7) == 0 {
			p.AssignedTo, p.AssignReason = worker, "knows it"
		}
		t, err := db.CreateTask(ctx, db.Pool(), p, w.admin)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.tasks = append(w.tasks, t.ID)
		w.mu.Unlock()
		return nil
	case r < 55: // a worker's session on the task it claims
		op = "claim session"
		t, err := db.Claim(ctx, worker, wm)
		if err != nil || t == nil {
			return err
		}
		for range rnd.IntN(4) {
			if err := update(t.ID, worker, wm, true); err != nil {
				return err
			}
		}
		if rnd.IntN(3) == 0 { // LLM usage, priced by the table or by the worker, or by neither
			u := events.UsageReport{Model: []string{"claude-sonnet-4-5", "claude-opus-4-5", "homebrew-llm"}[rnd.IntN(3)],
				InputTokens: rnd.Int64N(100_000), OutputTokens: rnd.Int64N(10_000), CacheReadTokens: rnd.Int64N(1_000_000)}
			if rnd.IntN(4) == 0 {
				cost := float64(rnd.IntN(1_000_000)) / 1e4
				u.CostUSD = &cost
			}
			if _, _, err := db.ReportUsage(ctx, t.ID, worker, u, wm); err != nil {
				return err
			}
		}
		decide := func(d store.TaskDecision) error { _, _, err := db.UpdateTask(ctx, db.Pool(), t.ID, wm, d); return err }
		switch r := rnd.IntN(10); {
		case r < 5:
			if err := decide(func(t *events.Task) ([]events.Payload, error) {
				return t.PostResult(worker, json.RawMessage(`{"ok": true}`))
			}); err != nil {
				return err
			}
			if rnd.IntN(2) == 0 { // the fused statement the API uses, and the general command
				_, _, err := db.CompleteTask(ctx, t.ID, worker, wm)
				return err
			}
			return decide(func(t *events.Task) ([]events.Payload, error) { return t.Complete(worker) })
		case r < 7:
			return decide(func(t *events.Task) ([]events.Payload, error) {
				return t.Fail(worker, events.FailureError, "tests failed", nil)
			})
		case r < 8:
			return decide(func(t *events.Task) ([]events.Payload, error) { return t.Release(worker, "out of time") })
		}
		return nil // still in progress
	case r < 63: // the retry decision on a failed task
		op = "retry decision"
		id := w.task(rnd)
		if id == "" {
			return nil
		}
		sys := events.Meta{Actor: events.System("retry")}
		switch rnd.IntN(5) {
		case 0:
			_, _, err := db.UpdateTask(ctx, db.Pool(), id, sys, func(t *events.Task) ([]events.Payload, error) {
				return t.RetrySkipped("looks permanent")
			})
			return err
		case 1:
			_, _, err := db.UpdateTask(ctx, db.Pool(), id, sys, func(t *events.Task) ([]events.Payload, error) {
				return t.RetriesExhausted(3)
			})
			return err
		}
		t, err := db.CreateRetry(ctx, db.Pool(), id, store.RetryParams{Hint: "try the other way", Meta: sys})
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.tasks = append(w.tasks, t.ID)
		w.mu.Unlock()
		return nil
	case r < 68: // the system fails a task in progress (timeout)
		op = "timeout"
		id := w.task(rnd)
		if id == "" {
			return nil
		}
		t, err := db.GetTask(ctx, db.Pool(), id)
		if err != nil || t.StartedAt == nil {
			return err
		}
		_, err = db.FailInProgress(ctx, id, store.SystemFailure{StartedAt: *t.StartedAt, Kind: events.FailureTimeout,
			Reason: "ran past its timeout", Evidence: json.RawMessage(`{"timeout_seconds": 60}`), Update: "Timed out."},
			events.Meta{Actor: events.System("stuck-detector")})
		return err
	case r < 73:
		op = "cancel"
		_, _, err := db.UpdateTask(ctx, db.Pool(), w.task(rnd), w.admin, func(t *events.Task) ([]events.Payload, error) {
			return t.Cancel(w.adminID, "not needed")
		})
		return err
	case r < 78:
		op = "assign"
		_, err := db.AssignTask(ctx, db.Pool(), w.task(rnd), worker, "best fit", w.admin)
		return err
	case r < 83:
		op = "edit"
		title := fmt.Sprintf("edited %d", rnd.IntN(1000))
		_, _, err := db.UpdateTask(ctx, db.Pool(), w.task(rnd), w.admin, func(t *events.Task) ([]events.Payload, error) {
			return t.Edit(events.TaskEdit{Title: &title})
		})
		return err
	case r < 86: // a worker goes silent: offline, its task failed as worker_offline
		op = "offline"
		if _, err := db.MarkWorkerOffline(ctx, worker, 0, events.Meta{Actor: events.System("stuck-detector")}); err != nil {
			return err
		}
		id := w.task(rnd)
		if id == "" {
			return nil
		}
		t, err := db.GetTask(ctx, db.Pool(), id)
		if err != nil || t.StartedAt == nil {
			return err
		}
		_, err = db.FailInProgress(ctx, id, store.SystemFailure{StartedAt: *t.StartedAt, Kind: events.FailureWorkerOffline,
			Reason: "worker silent", Evidence: json.RawMessage(`{"rule": "offline"}`)}, events.Meta{Actor: events.System("stuck-detector")})
		return err
	case r < 90:
		op = "heartbeat"
		_, err := db.Heartbeat(ctx, worker, store.HeartbeatParams{Status: "busy"}, wm)
		return err
	case r < 91:
		op = "type update"
		_, err := db.UpdateTaskType(ctx, w.types[rnd.IntN(len(w.types))], w.admin, func(tt *events.TaskType) ([]events.Payload, error) {
			spec := tt.TaskTypeSpec
			spec.SOP += "\nAnd check twice."
			return tt.Update(spec)
		})
		return err
	default:
		op = "admin update"
		id := w.task(rnd)
		if id == "" {
			return nil
		}
		return update(id, w.adminID, w.admin, false)
	}
}

// runConcurrently runs the workload on n goroutines of steps commands each.
func (w *workload) runConcurrently(ctx context.Context, t *testing.T, n, steps int, seed uint64) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- w.run(ctx, seed+uint64(i)*7919, steps) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// decideRetries makes sure each retry decision happened at least once:
// random commands rarely land on a failed task nobody decided on yet.
func (w *workload) decideRetries(ctx context.Context, t *testing.T) {
	t.Helper()
	rows, err := w.db.Pool().Query(ctx, `SELECT id FROM worker_tasks WHERE status = 'failed' AND retry_outcome IS NULL ORDER BY id LIMIT 3`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, ids, 3, "the workload leaves failed tasks undecided")
	sys := events.Meta{Actor: events.System("retry")}
	_, _, err = w.db.UpdateTask(ctx, w.db.Pool(), ids[0], sys, func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(1) })
	require.NoError(t, err)
	_, _, err = w.db.UpdateTask(ctx, w.db.Pool(), ids[1], sys, func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped("permanent") })
	require.NoError(t, err)
	_, err = w.db.CreateRetry(ctx, w.db.Pool(), ids[2], store.RetryParams{Hint: "look again", Meta: sys})
	require.NoError(t, err)
}
