package store

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// limitsEnv is a batchEnv with a clock the test moves, and helpers for
// limited types.
type limitsEnv struct {
	*batchEnv
	mu  sync.Mutex
	now time.Time
}

func newLimitsEnv(t *testing.T) *limitsEnv {
	e := &limitsEnv{batchEnv: newBatchEnv(t), now: time.Now().UTC()}
	e.db.now = func() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }
	return e
}

func (e *limitsEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func (e *limitsEnv) limitedType(t *testing.T, name string, l events.TypeLimits) string {
	t.Helper()
	tt, err := e.db.CreateTaskType(e.ctx, events.TaskTypeSpec{Name: name, Label: name, MaxRetries: 3,
		ParamSchema: []byte(`{"type":"object"}`), TypeLimits: l}, e.admin)
	require.NoError(t, err)
	return tt.ID
}

func (e *limitsEnv) taskOf(t *testing.T, typeID, params, assignee string) string {
	t.Helper()
	tk, err := e.db.CreateTask(e.ctx, e.db.pool, NewTaskParams{TaskTypeID: typeID, NewTaskParams: events.NewTaskParams{
		Title: "t", Priority: events.PriorityMedium, Params: json.RawMessage(params), AssignedTo: assignee}}, e.admin)
	require.NoError(t, err)
	return tk.ID
}

func (e *limitsEnv) claim(t *testing.T, worker string, n int) []*TaskWithType {
	t.Helper()
	got, err := e.db.ClaimMany(e.ctx, worker, n, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}})
	require.NoError(t, err)
	return got
}

func (e *limitsEnv) complete(t *testing.T, task *TaskWithType) {
	t.Helper()
	_, _, err := e.db.CompleteTask(e.ctx, task.ID, *task.AssignedTo, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: *task.AssignedTo}})
	require.NoError(t, err)
}

func ofType(tasks []*TaskWithType, typeID string) int {
	n := 0
	for _, tk := range tasks {
		if tk.TaskTypeID == typeID {
			n++
		}
	}
	return n
}

func ptr(n int) *int { return &n }

// max_in_progress holds across batches and workers; the slot a completion
// frees is taken by the next claim; a type without limits beside it is
// claimed as before.
func TestMaxInProgress(t *testing.T) {
	e := newLimitsEnv(t)
	capped := e.limitedType(t, "capped", events.TypeLimits{MaxInProgress: ptr(3)})
	a, b := e.user(t, "a", true, 10), e.user(t, "b", true, 10)
	for range 8 {
		e.taskOf(t, capped, `{}`, "")
	}
	for range 4 {
		e.task(t, "plain", events.PriorityLow, "")
	}

	got := e.claim(t, a, 5)
	require.Len(t, got, 5)
	require.Equal(t, 3, ofType(got, capped), "capped first (older, same rank as medium beats low), up to its limit")
	got = e.claim(t, b, 5)
	require.Len(t, got, 2, "the plain tasks left")
	require.Zero(t, ofType(got, capped), "capped is full")
	require.Empty(t, e.claim(t, b, 5))

	u, err := e.db.TypeUsage(e.ctx, capped)
	require.NoError(t, err)
	require.Equal(t, 3, u.InProgress)

	var one *TaskWithType
	for _, tk := range e.claimed(t, a) {
		if tk.TaskTypeID == capped {
			one = tk
			break
		}
	}
	e.complete(t, one)
	got = e.claim(t, b, 5)
	require.Len(t, got, 1, "the freed slot, and only it")
	require.Equal(t, capped, got[0].TaskTypeID)
	require.Equal(t, 3, e.inProgress(t, capped))
}

// claimed lists worker's tasks in progress.
func (e *limitsEnv) claimed(t *testing.T, worker string) []*TaskWithType {
	t.Helper()
	rows, err := e.db.pool.Query(e.ctx, `SELECT id::text, task_type_id::text FROM worker_tasks WHERE assigned_to = $1 AND status = 'in_progress'`, worker)
	require.NoError(t, err)
	defer rows.Close()
	var out []*TaskWithType
	for rows.Next() {
		tk := &TaskWithType{}
		require.NoError(t, rows.Scan(&tk.ID, &tk.TaskTypeID))
		tk.AssignedTo = &worker
		out = append(out, tk)
	}
	require.NoError(t, rows.Err())
	return out
}

func (e *limitsEnv) inProgress(t *testing.T, typeID string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status = 'in_progress'`, typeID).Scan(&n))
	return n
}

// max_in_progress_per_key: each key's tasks in progress stay within the
// limit, params without the path share the key "", and the keys are served
// round robin when the type's own limit lets only one run.
func TestMaxInProgressPerKey(t *testing.T) {
	e := newLimitsEnv(t)
	keyed := e.limitedType(t, "keyed", events.TypeLimits{ConcurrencyKey: "$.ticker", MaxInProgressPerKey: ptr(1)})
	a := e.user(t, "a", true, 20)
	for _, p := range []string{`{"ticker":"NVDA"}`, `{"ticker":"NVDA"}`, `{"ticker":"NVDA"}`, `{"ticker":"AMD"}`, `{"ticker":"AMD"}`, `{}`, `{"other":1}`} {
		e.taskOf(t, keyed, p, "")
	}
	got := e.claim(t, a, 20)
	keys := map[string]int{}
	for _, tk := range got {
		var p struct{ Ticker string }
		require.NoError(t, json.Unmarshal(tk.Params, &p))
		keys[p.Ticker]++
	}
	require.Equal(t, map[string]int{"NVDA": 1, "AMD": 1, "": 1}, keys)
	require.Empty(t, e.claim(t, a, 20), "every key is at its limit")

	u, err := e.db.TypeUsage(e.ctx, keyed)
	require.NoError(t, err)
	require.Equal(t, 3, u.KeysInProgress)
	require.Equal(t, 3, u.KeysAtLimit)

	for _, tk := range got {
		var p struct{ Ticker string }
		require.NoError(t, json.Unmarshal(tk.Params, &p))
		if p.Ticker == "NVDA" {
			e.complete(t, tk)
		}
	}
	again := e.claim(t, a, 20)
	require.Len(t, again, 1)
	require.JSONEq(t, `{"ticker":"NVDA"}`, string(again[0].Params))
}

// With room for one task at a time, the keys take turns: a key with a long
// backlog does not hold back the others.
func TestKeysTakeTurns(t *testing.T) {
	e := newLimitsEnv(t)
	keyed := e.limitedType(t, "turns", events.TypeLimits{MaxInProgress: ptr(1), ConcurrencyKey: "$.k", MaxInProgressPerKey: ptr(1)})
	a := e.user(t, "a", true, 5)
	for range 4 {
		e.taskOf(t, keyed, `{"k":"a"}`, "")
	}
	e.taskOf(t, keyed, `{"k":"b"}`, "")
	e.taskOf(t, keyed, `{"k":"c"}`, "")
	var order []string
	for range 5 {
		got := e.claim(t, a, 5)
		require.Len(t, got, 1)
		var p struct{ K string }
		require.NoError(t, json.Unmarshal(got[0].Params, &p))
		order = append(order, p.K)
		e.complete(t, got[0])
	}
	require.Equal(t, []string{"a", "b", "c", "a", "a"}, order)
}

// rate_limit: no window of `per` holds more than count claims; the next
// claim comes when the window's oldest claim leaves it, which is when the
// due timer is told to look.
func TestRateLimit(t *testing.T) {
	e := newLimitsEnv(t)
	rated := e.limitedType(t, "rated", events.TypeLimits{RateLimit: &events.RateLimit{Count: 2, Per: "10s"}})
	a := e.user(t, "a", true, 20)
	for range 5 {
		e.taskOf(t, rated, `{}`, "")
	}
	first := e.db.Now()
	got := e.claim(t, a, 5)
	require.Len(t, got, 2)
	for _, tk := range got {
		e.complete(t, tk)
	}
	e.advance(4 * time.Second)
	require.Empty(t, e.claim(t, a, 5), "two claims in the last 10 s")
	next, err := e.db.NextWakeAt(e.ctx)
	require.NoError(t, err)
	require.NotNil(t, next)
	require.Equal(t, first.Add(10*time.Second), *next, "the window regains room when its first claims are 10 s old")

	u, err := e.db.TypeUsage(e.ctx, rated)
	require.NoError(t, err)
	require.Equal(t, 2, *u.ClaimsInWindow)
	require.Equal(t, first.Add(10*time.Second), *u.NextSlotAt)
	c, err := e.db.Claimable(e.ctx, []string{a}, 10)
	require.NoError(t, err)
	require.Zero(t, c.Pool, "a full window wakes nobody")

	e.advance(6*time.Second - time.Microsecond)
	require.Empty(t, e.claim(t, a, 5), "a microsecond before the window ends")
	e.advance(time.Microsecond)
	c, err = e.db.Claimable(e.ctx, []string{a}, 10)
	require.NoError(t, err)
	require.Equal(t, 2, c.Pool)
	got = e.claim(t, a, 5)
	require.Len(t, got, 2)
	e.advance(10 * time.Second)
	require.Len(t, e.claim(t, a, 5), 1, "the last one")
	next, err = e.db.NextWakeAt(e.ctx)
	require.NoError(t, err)
	require.Nil(t, next, "nothing waits")
}

// A task assigned to a worker waits for its type's room like the others,
// and is its worker's first once there is room.
func TestAssignedTaskWaitsForRoom(t *testing.T) {
	e := newLimitsEnv(t)
	capped := e.limitedType(t, "capped", events.TypeLimits{MaxInProgress: ptr(1)})
	a, b := e.user(t, "a", true, 5), e.user(t, "b", true, 5)
	mine := e.taskOf(t, capped, `{}`, a)
	e.taskOf(t, capped, `{}`, "")
	e.taskOf(t, capped, `{}`, "")
	got := e.claim(t, b, 5)
	require.Len(t, got, 1)
	c, err := e.db.Claimable(e.ctx, []string{a, b}, 10)
	require.NoError(t, err)
	require.Equal(t, Claimable{Pool: 0, Assigned: []string{}, Limited: true}, c, "the type is full")
	require.Empty(t, e.claim(t, a, 5), "a's own task waits for room")
	e.complete(t, got[0])
	got = e.claim(t, a, 5)
	require.Len(t, got, 1)
	require.Equal(t, mine, got[0].ID)
}

// Removing a type's limits makes its waiting tasks ordinary pool tasks
// again; setting them holds back the next claims at once.
func TestLimitsChange(t *testing.T) {
	e := newLimitsEnv(t)
	typ := e.limitedType(t, "changing", events.TypeLimits{MaxInProgress: ptr(1)})
	a := e.user(t, "a", true, 10)
	for range 5 {
		e.taskOf(t, typ, `{}`, "")
	}
	require.Len(t, e.claim(t, a, 5), 1)
	update := func(l events.TypeLimits) {
		t.Helper()
		_, err := e.db.UpdateTaskType(e.ctx, typ, e.admin, func(tt *events.TaskType) ([]events.Payload, error) {
			spec := events.TaskTypeSpec{Name: tt.Name, Label: tt.Label, ParamSchema: tt.ParamSchema, MaxRetries: tt.MaxRetries, TypeLimits: l}
			return tt.Update(spec)
		})
		require.NoError(t, err)
	}
	update(events.TypeLimits{})
	require.Len(t, e.claim(t, a, 2), 2, "no limit now")
	update(events.TypeLimits{MaxInProgress: ptr(4)})
	require.Len(t, e.claim(t, a, 5), 1, "three in progress, room for one more")
	require.Equal(t, 4, e.inProgress(t, typ))
}

// A claim runs without the limited branch while no type is limited, and
// a type limited since the last claim (on this instance or another) is
// still served by the very next claim: the batch that finds one claims
// again with the branch for the workers still short.
func TestClaimServesALimitedTypeThatAppearedSinceTheLastClaim(t *testing.T) {
	e := newLimitsEnv(t)
	w := e.user(t, "w", true, 5)
	e.taskOf(t, e.typeID, `{}`, "")
	require.Len(t, e.claim(t, w, 1), 1)
	require.False(t, e.db.limited.Load(), "no limited type: the next claim goes without the branch")

	limited := e.limitedType(t, "limited", events.TypeLimits{MaxInProgress: ptr(1)})
	gated := e.taskOf(t, limited, `{}`, "")
	plain := e.taskOf(t, e.typeID, `{}`, "")
	got := e.claim(t, w, 3)
	require.ElementsMatch(t, []string{gated, plain}, []string{got[0].ID, got[1].ID}, "both in one call")
	require.Len(t, got, 2)
	require.True(t, e.db.limited.Load())

	// The limit holds on the way back: a second task of the type waits
	// while the first is in progress.
	e.taskOf(t, limited, `{}`, "")
	require.Empty(t, e.claim(t, w, 3))
	require.True(t, e.db.limited.Load())
}
