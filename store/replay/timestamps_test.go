package replay_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// A run_at given to the nanosecond is kept to the microsecond the same
// way by a batch's multi-row insert as by replay's row-by-row writes.
// The insert's JSON text was rounded by PostgreSQL where pgx's binary
// encoding truncates, and verify found half such tasks one microsecond off.
func TestBatchRunAtNanosecondsReplayExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 1)
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	var ps []store.NewTaskParams
	for i := range 20 {
		at := base.Add(time.Duration(i)*time.Millisecond + 987654721)
		ps = append(ps, store.NewTaskParams{TaskTypeID: w.types[0], NewTaskParams: events.NewTaskParams{
			Title: "later", Params: json.RawMessage(`{}`), AvailableAt: &at}})
	}
	outs, err := w.db.CreateTasks(ctx, pool, ps, w.admin)
	require.NoError(t, err)
	require.Len(t, outs, 20)
	requireClean(t, verify(t, pool))
}
