package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// keyedEnv is batchEnv on a clock the test moves.
type keyedEnv struct {
	*batchEnv
	offset atomic.Int64
}

func newKeyedEnv(t *testing.T) *keyedEnv {
	t.Helper()
	e := &keyedEnv{}
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.Now().Add(time.Duration(e.offset.Load())) }})
	require.NoError(t, err)
	e.batchEnv = &batchEnv{ctx: t.Context(), db: db, admin: events.Meta{Actor: events.System("test")}}
	tt, err := db.CreateTaskType(e.ctx, events.TaskTypeSpec{Name: "job", Label: "Job", MaxRetries: 3, ParamSchema: []byte(`{"type":"object"}`)}, e.admin)
	require.NoError(t, err)
	e.typeID = tt.ID
	return e
}

func (e *keyedEnv) params(typeID, key string, window time.Duration) NewTaskParams {
	return NewTaskParams{TaskTypeID: typeID, NewTaskParams: events.NewTaskParams{
		Title: "keyed " + key, Params: json.RawMessage(`{}`), UniqueKey: key, UniqueFor: window}}
}

func (e *keyedEnv) create(typeID, key string, window time.Duration) (*events.Task, error) {
	return e.db.CreateTask(e.ctx, e.db.pool, e.params(typeID, key, window), e.admin)
}

// requireHeldBy says the creation was refused because holder has the key.
func requireHeldBy(t *testing.T, err error, holder string) {
	t.Helper()
	var dup *events.DuplicateTaskError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, holder, dup.TaskID)
	require.ErrorIs(t, err, events.ErrConflict)
}

// claimAndFinish claims the only claimable task as worker w and completes
// or fails it.
func (e *keyedEnv) claimAndFinish(t *testing.T, w, id string, status events.Status) {
	t.Helper()
	got, err := e.db.Claim(e.ctx, w, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, id, got.ID)
	outs, err := e.db.FinishTasks(e.ctx, w, []Finish{{ID: id, Status: status, Reason: "boom"}},
		events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
	require.NoError(t, err)
	require.NoError(t, outs[0].Err)
}

// A unique key is held while its task is pending or in progress, per type;
// it is free again once the task ends, unless the creator asked for a
// window, which counts from the last completed task with the key.
func TestUniqueKeyIsHeldWhileTheTaskIsLive(t *testing.T) {
	e := newKeyedEnv(t)
	w := e.user(t, "w", true, 1)
	other, err := e.db.CreateTaskType(e.ctx, events.TaskTypeSpec{Name: "other", Label: "Other", ParamSchema: []byte(`{"type":"object"}`)}, e.admin)
	require.NoError(t, err)

	first, err := e.create(e.typeID, "nvda", 0)
	require.NoError(t, err)
	require.Equal(t, "nvda", *first.UniqueKey)
	e.requireRowIsFold(t, first.ID)
	_, err = e.create(e.typeID, "nvda", 0)
	requireHeldBy(t, err, first.ID)
	_, err = e.create(other.ID, "nvda", 0)
	require.NoError(t, err, "keys are per type")
	_, err = e.create(e.typeID, "NVDA", 0)
	require.NoError(t, err, "keys are compared exactly")

	// In progress it still holds the key; inside a caller's transaction too.
	got, err := e.db.Claim(e.ctx, w, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
	require.NoError(t, err)
	require.Equal(t, first.ID, got.ID)
	err = e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateTask(e.ctx, tx, e.params(e.typeID, "nvda", 0), e.admin)
		return err
	})
	requireHeldBy(t, err, first.ID)

	// Completed: free, unless a window asks otherwise.
	_, err = e.db.FinishTasks(e.ctx, w, []Finish{{ID: first.ID, Status: events.StatusCompleted}}, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
	require.NoError(t, err)
	_, err = e.create(e.typeID, "nvda", time.Hour)
	requireHeldBy(t, err, first.ID)
	e.offset.Store(int64(59 * time.Minute))
	_, err = e.create(e.typeID, "nvda", time.Hour)
	requireHeldBy(t, err, first.ID)
	e.offset.Store(int64(61 * time.Minute))
	second, err := e.create(e.typeID, "nvda", time.Hour)
	require.NoError(t, err, "the window has passed")
	e.requireRowIsFold(t, second.ID)

	// Cancelled: free at once, whatever the window (only completions count).
	_, _, err = e.db.UpdateTask(e.ctx, e.db.pool, second.ID, e.admin, func(t *events.Task) ([]events.Payload, error) { return t.Cancel("test", "") })
	require.NoError(t, err)
	third, err := e.create(e.typeID, "nvda", 24*time.Hour)
	requireHeldBy(t, err, first.ID) // first completed 61 minutes ago, inside 24 h
	require.Nil(t, third)
	fourth, err := e.create(e.typeID, "nvda", 0)
	require.NoError(t, err)

	var created string
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT data->>'unique_for' FROM task_events WHERE stream_id = $1 AND version = 1`, second.ID).Scan(&created))
	require.Equal(t, "1h0m0s", created, "the window is recorded on task.created")
	require.Nil(t, fourth.ParentTaskID)
}

// The partial unique index is the guarantee, whatever writes the row: a
// second live task with the same type and key cannot exist.
func TestUniqueKeyIsADatabaseConstraint(t *testing.T) {
	e := newKeyedEnv(t)
	a, err := e.create(e.typeID, "k", 0)
	require.NoError(t, err)
	b := e.task(t, "plain", events.PriorityLow, "")
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET unique_key = 'k' WHERE id = $1`, b)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, "worker_tasks_unique_active", pgErr.ConstraintName)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET status = 'cancelled' WHERE id = $1`, a.ID)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET unique_key = 'k' WHERE id = $1`, b)
	require.NoError(t, err, "an ended task holds no key")
}

// Concurrent creations with one key, through the batcher and in batches of
// their own, make exactly one task; every other one is told which.
func TestUniqueKeyUnderConcurrency(t *testing.T) {
	e := newKeyedEnv(t)
	const n = 60
	var wg sync.WaitGroup
	ids := make([]string, n)
	holders := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var t *events.Task
			var err error
			switch i % 3 {
			case 0: // the batcher, with unkeyed creations in the same batches
				t, err = e.create(e.typeID, "one", time.Hour)
				_, _ = e.create(e.typeID, "", 0)
			case 1: // a caller's transaction
				err = e.db.WithTx(e.ctx, func(tx pgx.Tx) (err error) {
					t, err = e.db.CreateTask(e.ctx, tx, e.params(e.typeID, "one", 0), e.admin)
					return err
				})
			default: // a batch of many
				var cs []Created
				cs, err = e.db.CreateTasks(e.ctx, e.db.pool, []NewTaskParams{e.params(e.typeID, fmt.Sprint("solo-", i), 0), e.params(e.typeID, "one", 0)}, e.admin)
				if err == nil {
					if cs[0].Err != nil {
						errs[i] = cs[0].Err
						return
					}
					t, err = cs[1].Task, cs[1].Err
				}
			}
			var dup *events.DuplicateTaskError
			switch {
			case errors.As(err, &dup):
				holders[i] = dup.TaskID
			case err != nil:
				errs[i] = err
			default:
				ids[i] = t.ID
			}
		})
	}
	wg.Wait()
	var winner string
	for i := range n {
		require.NoError(t, errs[i])
		if ids[i] != "" {
			require.Empty(t, winner, "two creations won")
			winner = ids[i]
		}
	}
	require.NotEmpty(t, winner)
	for i := range n {
		if ids[i] == "" {
			require.Equal(t, winner, holders[i])
		}
	}
	var keyed int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM worker_tasks WHERE unique_key = 'one'`).Scan(&keyed))
	require.Equal(t, 1, keyed)
}

// One batch with a key twice creates the first; the second is a duplicate
// of it.
func TestUniqueKeyTwiceInOneBatch(t *testing.T) {
	e := newKeyedEnv(t)
	cs, err := e.db.CreateTasks(e.ctx, e.db.pool, []NewTaskParams{
		e.params(e.typeID, "a", 0), e.params(e.typeID, "b", 0), e.params(e.typeID, "a", 0),
		e.params(e.typeID, string(make([]byte, 201)), 0), e.params(e.typeID, "c", -time.Second),
	}, e.admin)
	require.NoError(t, err)
	require.NoError(t, cs[0].Err)
	require.NoError(t, cs[1].Err)
	requireHeldBy(t, cs[2].Err, cs[0].Task.ID)
	var ve *events.ValidationError
	require.ErrorAs(t, cs[3].Err, &ve)
	require.Equal(t, "unique_key", ve.Field)
	require.ErrorAs(t, cs[4].Err, &ve)
	require.Equal(t, "unique_for", ve.Field)
	for _, c := range cs[:2] {
		e.requireRowIsFold(t, c.Task.ID)
	}
}

// A retry keeps its task's key; when another task took the key meanwhile,
// no retry is made and the failed task says why.
func TestRetryKeepsTheUniqueKey(t *testing.T) {
	e := newKeyedEnv(t)
	w := e.user(t, "w", true, 1)
	failed, err := e.create(e.typeID, "crawl", 0)
	require.NoError(t, err)
	e.claimAndFinish(t, w, failed.ID, events.StatusFailed)

	var retry *events.Task
	require.NoError(t, e.db.WithTx(e.ctx, func(tx pgx.Tx) (err error) {
		retry, err = e.db.CreateRetry(e.ctx, tx, failed.ID, RetryParams{Meta: e.admin})
		return err
	}))
	require.Equal(t, "crawl", *retry.UniqueKey)
	e.requireRowIsFold(t, retry.ID)
	_, err = e.create(e.typeID, "crawl", 0)
	requireHeldBy(t, err, retry.ID)

	// The retry fails too; meanwhile a new task takes the key.
	e.claimAndFinish(t, w, retry.ID, events.StatusFailed)
	taker, err := e.create(e.typeID, "crawl", 0)
	require.NoError(t, err)
	err = e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateRetry(e.ctx, tx, retry.ID, RetryParams{Meta: e.admin, Manual: true})
		return err
	})
	requireHeldBy(t, err, taker.ID)
	after, err := e.db.GetTask(e.ctx, e.db.pool, retry.ID)
	require.NoError(t, err)
	require.Nil(t, after.RetryOutcome, "nothing was written")
}
