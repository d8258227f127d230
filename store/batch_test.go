package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// batchEnv is a fresh database with one task type.
type batchEnv struct {
	ctx    context.Context
	db     *DB
	typeID string
	admin  events.Meta
}

func newBatchEnv(t *testing.T) *batchEnv {
	t.Helper()
	ctx := context.Background()
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	e := &batchEnv{ctx: ctx, db: db, admin: events.Meta{Actor: events.System("test")}}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "job", Label: "Job", ParamSchema: []byte(`{"type":"object"}`)}, e.admin)
	require.NoError(t, err)
	e.typeID = tt.ID
	return e
}

func (e *batchEnv) user(t *testing.T, name string, worker bool, limit int) string {
	t.Helper()
	u, err := e.db.CreateUser(e.ctx, events.UserRegistered{Email: name + "@test.invalid", FullName: name,
		IsWorker: worker, IsAdmin: !worker, MaxConcurrentTasks: limit}, "password", "not-a-real-hash", e.admin)
	require.NoError(t, err)
	return u.ID
}

func (e *batchEnv) task(t *testing.T, title string, p events.Priority, assignee string) string {
	t.Helper()
	tk, err := e.db.CreateTask(e.ctx, e.db.pool, NewTaskParams{TaskTypeID: e.typeID, NewTaskParams: events.NewTaskParams{
		Title: title, Priority: p, Params: json.RawMessage(`{}`), AssignedTo: assignee}}, e.admin)
	require.NoError(t, err)
	return tk.ID
}

func claimReq(t *testing.T, worker string) claimRequest {
	data, err := json.Marshal(events.TaskClaimed{WorkerID: worker})
	require.NoError(t, err)
	meta, err := json.Marshal(events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}})
	require.NoError(t, err)
	return claimRequest{worker: worker, data: string(data), meta: string(meta), want: 1}
}

// first is a claim's only task; nil when it got none.
func first(tasks []*TaskWithType) *TaskWithType {
	if len(tasks) == 0 {
		return nil
	}
	return tasks[0]
}

// One batch of claims follows the claim rules for each worker in it: its
// own assigned task first, else the pool in priority then FIFO order, given
// out in request order; nothing for a worker at its limit; forbidden for a
// user that is not a worker. The rows it writes equal the fold of the events
// it appends.
func TestClaimBatchFollowsTheClaimRules(t *testing.T) {
	e := newBatchEnv(t)
	a := e.user(t, "a", true, 1)
	b := e.user(t, "b", true, 2)
	full := e.user(t, "full", true, 1)
	pre := e.user(t, "pre", true, 1)
	admin := e.user(t, "admin", false, 1)

	held := e.task(t, "held by full", events.PriorityUrgent, full)
	got, err := e.db.Claim(e.ctx, full, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: full}})
	require.NoError(t, err)
	require.Equal(t, held, got.ID)

	low := e.task(t, "low", events.PriorityLow, "")
	high1 := e.task(t, "high 1", events.PriorityHigh, "")
	high2 := e.task(t, "high 2", events.PriorityHigh, "")
	mine := e.task(t, "pre's own, low", events.PriorityLow, pre)

	outs := e.db.claims.runAll(e.ctx, []claimRequest{claimReq(t, a), claimReq(t, full), claimReq(t, pre), claimReq(t, admin), claimReq(t, b)})
	require.Len(t, outs, 5)
	require.NoError(t, outs[0].err)
	require.Equal(t, high1, first(outs[0].res).ID, "first in the batch gets the pool's first task")
	require.NoError(t, outs[1].err)
	require.Empty(t, outs[1].res, "a worker at its limit gets nothing")
	require.NoError(t, outs[2].err)
	require.Equal(t, mine, first(outs[2].res).ID, "a worker's own task comes before the pool")
	require.ErrorIs(t, outs[3].err, events.ErrForbidden)
	require.NoError(t, outs[4].err)
	require.Equal(t, high2, first(outs[4].res).ID)

	for i, w := range map[int]string{0: a, 2: pre, 4: b} {
		tk := first(outs[i].res)
		require.Equal(t, events.StatusInProgress, tk.Status)
		require.Equal(t, w, *tk.AssignedTo)
		require.Equal(t, e.typeID, tk.TaskType.ID, "the claim carries the task's type")
		e.requireRowIsFold(t, tk.ID)
	}
	var assignments int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_assignments WHERE kind = 'claimed'`).Scan(&assignments))
	require.Equal(t, 4, assignments, "one assignment row per claim, the first claim's included")

	// b has room for one more: the next batch gives it the last pool task.
	outs = e.db.claims.runAll(e.ctx, []claimRequest{claimReq(t, b), claimReq(t, a)})
	require.Equal(t, low, first(outs[0].res).ID)
	require.Empty(t, outs[1].res, "a is at its limit")
}

// A batch that fails as a whole (here one claim's meta is not JSON) runs
// each claim again alone: only the broken one fails.
func TestClaimBatchFailureFailsOnlyTheBrokenClaim(t *testing.T) {
	e := newBatchEnv(t)
	a, b := e.user(t, "a", true, 1), e.user(t, "b", true, 1)
	e.task(t, "one", events.PriorityMedium, "")
	e.task(t, "two", events.PriorityMedium, "")

	broken := claimReq(t, b)
	broken.meta = "{not json"
	outs := e.db.claims.runAll(e.ctx, []claimRequest{claimReq(t, a), broken})
	require.NoError(t, outs[0].err)
	require.NotNil(t, outs[0].res)
	require.Error(t, outs[1].err)
	var inProgress int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM worker_tasks WHERE status = 'in_progress'`).Scan(&inProgress))
	require.Equal(t, 1, inProgress, "the failed claim left nothing behind")
}

// A batch of completions completes what each worker holds in progress and
// leaves the rest to the general command, which says why.
func TestCompleteBatch(t *testing.T) {
	e := newBatchEnv(t)
	a, b := e.user(t, "a", true, 1), e.user(t, "b", true, 1)
	ta, tb := e.task(t, "a's", events.PriorityMedium, a), e.task(t, "b's", events.PriorityMedium, b)
	for _, w := range []string{a, b} {
		got, err := e.db.Claim(e.ctx, w, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
		require.NoError(t, err)
		require.NotNil(t, got)
	}
	req := func(id, worker, meta string) completeRequest {
		return completeRequest{id: id, worker: worker, data: fmt.Sprintf(`{"worker_id":%q}`, worker), meta: meta}
	}
	meta := `{"actor":{"kind":"worker","id":"x"}}`
	outs := e.db.completions.runAll(e.ctx, []completeRequest{req(tb, a, meta), req(ta, a, meta), req(tb, b, "{not json")})
	require.NoError(t, outs[0].err)
	require.Empty(t, outs[0].res, "a does not hold b's task")
	require.NoError(t, outs[1].err)
	require.Equal(t, events.StatusCompleted, outs[1].res.Status)
	require.Error(t, outs[2].err, "the broken request fails alone")
	e.requireRowIsFold(t, ta)

	_, _, err := e.db.CompleteTask(e.ctx, tb, a, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: a}})
	require.ErrorIs(t, err, events.ErrForbidden, "the general command explains a miss")
	_, _, err = e.db.CompleteTask(e.ctx, ta, a, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: a}})
	var te *events.TransitionError
	require.ErrorAs(t, err, &te, "completing twice")
}

func (e *batchEnv) typeOf(t *testing.T) *events.TaskType {
	t.Helper()
	tt, err := e.db.GetTaskType(e.ctx, e.db.pool, e.typeID)
	require.NoError(t, err)
	return tt
}

// requireRowIsFold checks the task's row against the fold of its events.
func (e *batchEnv) requireRowIsFold(t *testing.T, id string) {
	t.Helper()
	evs, err := e.db.Stream(e.ctx, e.db.pool, id)
	require.NoError(t, err)
	var fold events.Task
	for _, ev := range evs {
		fold.Apply(ev)
	}
	row, err := e.db.GetTask(e.ctx, e.db.pool, id)
	require.NoError(t, err)
	require.Equal(t, fold, *row)
}

// The batcher never puts two calls with one key in a batch or in flight at
// once, answers every call with its own result, and runs a lone call at once.
func TestBatcher(t *testing.T) {
	var inFlight sync.Map
	var batches, biggest atomic.Int64
	run := func(_ context.Context, reqs []string) ([]outcome[string], error) {
		batches.Add(1)
		if n := int64(len(reqs)); n > biggest.Load() {
			biggest.Store(n)
		}
		outs := make([]outcome[string], len(reqs))
		for i, r := range reqs {
			if _, dup := inFlight.LoadOrStore(keyOf(r), true); dup {
				outs[i].err = fmt.Errorf("key %s twice in flight", keyOf(r))
			}
		}
		time.Sleep(time.Millisecond)
		for i, r := range reqs {
			inFlight.Delete(keyOf(r))
			if outs[i].err == nil {
				outs[i].res = "done " + r
			}
		}
		return outs, nil
	}
	b := newBatcher(8, keyOf, run)

	got, err := b.do(context.Background(), "k0/alone")
	require.NoError(t, err)
	require.Equal(t, "done k0/alone", got)
	require.EqualValues(t, 1, batches.Load())

	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := fmt.Sprintf("k%d/%d", i%10, i)
			got, err := b.do(context.Background(), req)
			if err == nil && got != "done "+req {
				err = fmt.Errorf("%s got %q", req, got)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Greater(t, biggest.Load(), int64(1), "calls that arrived together shared a batch")
	require.LessOrEqual(t, biggest.Load(), int64(8))

	// A call whose context ends while it waits is dropped, not run.
	block := make(chan struct{})
	var ran atomic.Int64
	slow := newBatcher(8, keyOf, func(_ context.Context, reqs []string) ([]outcome[string], error) {
		ran.Add(int64(len(reqs)))
		<-block
		return make([]outcome[string], len(reqs)), nil
	})
	go func() { _, _ = slow.do(context.Background(), "a/1") }()
	require.Eventually(t, func() bool { return ran.Load() == 1 }, time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error)
	go func() { _, err := slow.do(ctx, "b/1"); waited <- err }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	require.True(t, errors.Is(<-waited, context.Canceled))
	close(block)
	time.Sleep(10 * time.Millisecond)
	require.EqualValues(t, 1, ran.Load(), "the dropped call never ran")
}

func keyOf(req string) string {
	for i := range req {
		if req[i] == '/' {
			return req[:i]
		}
	}
	return req
}

// A batch of creations checks each task on its own (type, assignee, title)
// and writes the rest in one transaction; each row equals the fold of its
// events, and an assigned task carries its assignment.
func TestCreateBatch(t *testing.T) {
	e := newBatchEnv(t)
	w := e.user(t, "w", true, 1)
	admin := e.user(t, "admin", false, 1)
	archived, err := e.db.CreateTaskType(e.ctx, events.TaskTypeSpec{Name: "old", Label: "Old", ParamSchema: []byte(`{"type":"object"}`)}, e.admin)
	require.NoError(t, err)
	archivedType, err := e.db.UpdateTaskType(e.ctx, archived.ID, e.admin, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Archive() })
	require.NoError(t, err)
	handedOver := func(r createRequest, tt *events.TaskType) createRequest {
		r.params.TaskType = tt
		return r
	}

	req := func(title, typeID, assignee string) createRequest {
		return createRequest{meta: e.admin, params: NewTaskParams{TaskTypeID: typeID, NewTaskParams: events.NewTaskParams{
			Title: title, Priority: events.PriorityHigh, Params: json.RawMessage(`{"n":1}`), AssignedTo: assignee}}}
	}
	outs := e.db.creations.runAll(e.ctx, []createRequest{
		req("plain", e.typeID, ""),
		req("no type", "00000000-0000-0000-0000-000000000000", ""),
		req("archived type", archived.ID, ""),
		req("to an admin", e.typeID, admin),
		req("  ", e.typeID, ""),
		req("assigned", strings.ToUpper(e.typeID), w),
		handedOver(req("type handed over", e.typeID, ""), e.typeOf(t)),
		handedOver(req("archived type handed over", archived.ID, ""), archivedType),
	})
	fieldOf := func(err error) string {
		field, named := events.FieldOf(err)
		require.True(t, named, "%v", err)
		return field
	}
	require.NoError(t, outs[0].err)
	require.Equal(t, "task_type_id", fieldOf(outs[1].err))
	require.Equal(t, "task_type_id", fieldOf(outs[2].err))
	require.Equal(t, "assigned_to", fieldOf(outs[3].err))
	require.Equal(t, "title", fieldOf(outs[4].err))
	require.NoError(t, outs[5].err)
	require.Equal(t, w, *outs[5].res.AssignedTo)
	require.NoError(t, outs[6].err)
	require.Equal(t, "task_type_id", fieldOf(outs[7].err))

	for _, i := range []int{0, 5, 6} {
		e.requireRowIsFold(t, outs[i].res.ID)
	}
	var tasks, assignments int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM worker_tasks),
		(SELECT count(*) FROM task_assignments WHERE kind = 'assigned')`).Scan(&tasks, &assignments))
	require.Equal(t, 3, tasks, "only the valid tasks were written")
	require.Equal(t, 1, assignments)
}

// A batch PostgreSQL failed (so rolled back) runs again one request at a
// time; a batch that failed any other way (it may have committed) is not
// run again: every call gets the error.
func TestBatcherRerunsAloneOnlyAfterARollback(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantCalls int
	}{
		{"rolled back", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}), 4},
		{"outcome unknown", fmt.Errorf("claim: %w", errors.New("connection reset by peer")), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			b := newBatcher(8, nil, func(_ context.Context, reqs []string) ([]outcome[string], error) {
				calls++
				if len(reqs) > 1 || reqs[0] == "bad" {
					return nil, tc.err
				}
				return []outcome[string]{{res: "done " + reqs[0]}}, nil
			})
			outs := b.runAll(context.Background(), []string{"a", "bad", "c"})
			require.Equal(t, tc.wantCalls, calls)
			require.Error(t, outs[1].err)
			if tc.wantCalls == 1 {
				require.Error(t, outs[0].err)
				require.Error(t, outs[2].err)
				return
			}
			require.Equal(t, "done a", outs[0].res)
			require.Equal(t, "done c", outs[2].res)
			require.ErrorIs(t, outs[1].err, events.ErrConflict, "errors reach the caller mapped")
		})
	}
}

// Bulk creations of one instance write at most bulkCreateSlots at a time;
// the others wait in Go, not in PostgreSQL. The task type's row is locked
// FOR UPDATE so that writers block on it where they can be counted: as
// many as there are slots, however many calls are made.
func TestCreateTasksWriteAFewAtATime(t *testing.T) {
	e := newBatchEnv(t)
	lock, err := e.db.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer lock.Rollback(e.ctx)
	_, err = lock.Exec(e.ctx, `SELECT 1 FROM task_types WHERE id = $1 FOR UPDATE`, e.typeID)
	require.NoError(t, err)

	const calls = bulkCreateSlots + 3
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			_, err := e.db.CreateTasks(e.ctx, e.db.pool, []NewTaskParams{{TaskTypeID: e.typeID,
				NewTaskParams: events.NewTaskParams{Title: fmt.Sprintf("bulk %d", i), Params: json.RawMessage(`{}`)}}}, e.admin)
			errs <- err
		}()
	}
	blocked := func() (n int) {
		require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH r AS MATERIALIZED%'`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return blocked() == bulkCreateSlots }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the other calls had the time to reach PostgreSQL, were they let through
	require.Equal(t, bulkCreateSlots, blocked())
	require.NoError(t, lock.Rollback(e.ctx))
	for range calls {
		require.NoError(t, <-errs)
	}
	var n int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM worker_tasks`).Scan(&n))
	require.Equal(t, calls, n)
}

// Holder checks made together share a statement and each gets its own
// answer: the ids among its own that its worker does not hold (held by
// another or by nobody); unknown ids are left to the items.
func TestHolderChecksBatch(t *testing.T) {
	e := newBatchEnv(t)
	a, b := e.user(t, "a", true, 1), e.user(t, "b", true, 1)
	ta, tb := e.task(t, "a's", events.PriorityMedium, a), e.task(t, "b's", events.PriorityMedium, b)
	for _, w := range []string{a, b} {
		got, err := e.db.Claim(e.ctx, w, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
		require.NoError(t, err)
		require.NotNil(t, got)
	}
	free := e.task(t, "nobody's", events.PriorityMedium, "")
	unknown := "00000000-0000-0000-0000-000000000001"
	outs := e.db.holderChecks.runAll(e.ctx, []holderCheck{
		{worker: a, ids: []string{ta, unknown}},
		{worker: a, ids: []string{ta, tb, free}},
		{worker: b, ids: []string{tb}},
		{worker: b, ids: []string{ta}},
	})
	for _, o := range outs {
		require.NoError(t, o.err)
	}
	require.Empty(t, outs[0].res)
	require.Equal(t, map[string]bool{tb: true, free: true}, outs[1].res)
	require.Empty(t, outs[2].res)
	require.Equal(t, map[string]bool{ta: true}, outs[3].res)

	_, err := e.db.FinishTasks(e.ctx, a, []Finish{{ID: ta, Status: events.StatusCompleted}, {ID: tb, Status: events.StatusCompleted}},
		events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: a}})
	var ie *ItemError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, 1, ie.Index)
	require.ErrorIs(t, err, events.ErrForbidden)
	task, err := e.db.GetTask(e.ctx, e.db.pool, ta)
	require.NoError(t, err)
	require.Equal(t, events.StatusInProgress, task.Status, "a refused request changes nothing")
}
