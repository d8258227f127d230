package replay_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// The gate columns of worker_tasks are copied from the tasks' types: a
// pause sets them on the type's open tasks, a task created while paused
// has them, verify checks them against the live types, and a rebuild
// derives them again.
func TestGatesAreVerifiedAndRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 2)
	crawl := w.types[1]
	newTask := func() string {
		tk, err := w.db.CreateTask(ctx, pool, store.NewTaskParams{TaskTypeID: crawl, NewTaskParams: events.NewTaskParams{
			Title: "crawl", Params: json.RawMessage(`{"ticker":"NVDA"}`)}}, w.admin)
		require.NoError(t, err)
		return tk.ID
	}
	before := []string{newTask(), newTask()}
	_, err := w.db.UpdateTaskType(ctx, crawl, w.admin, func(tt *events.TaskType) ([]events.Payload, error) {
		return tt.Pause(w.adminID, "upstream down")
	})
	require.NoError(t, err)
	during := newTask()
	gated := `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND gated`
	require.EqualValues(t, 3, count(t, pool, gated, crawl))
	requireClean(t, verify(t, pool))

	// A task left in the claim's indexes under a paused type is reported.
	_, err = pool.Exec(ctx, `UPDATE worker_tasks SET gated = false WHERE id = $1`, before[0])
	require.NoError(t, err)
	rep := verify(t, pool)
	require.False(t, rep.Clean())
	require.Len(t, rep.Differences, 1)
	d := rep.Differences[0]
	require.Equal(t, "worker_tasks", d.Table)
	require.Equal(t, []string{"gated", "concurrency_key"}, d.Columns)
	require.Equal(t, "id="+before[0], d.Key)
	require.Equal(t, []string{"gated"}, d.Changed)

	// A rebuild derives the gates from the rebuilt types.
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))
	require.EqualValues(t, 3, count(t, pool, gated, crawl))

	// After a resume, nothing is gated, and the rebuild agrees.
	_, err = w.db.UpdateTaskType(ctx, crawl, w.admin, func(tt *events.TaskType) ([]events.Payload, error) {
		return tt.Resume(w.adminID, "")
	})
	require.NoError(t, err)
	require.Zero(t, count(t, pool, gated, crawl))
	_, err = pool.Exec(ctx, `UPDATE worker_tasks SET gated = true WHERE id = $1`, during)
	require.NoError(t, err)
	require.False(t, verify(t, pool).Clean())
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))
	require.Zero(t, count(t, pool, gated, crawl))
}
