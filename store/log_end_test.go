package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// A position this database has not reached can only come from another
// server's log (a failover to a standby that lagged); LastHeld finds where
// the two logs part.
func TestLogEndTellsAPositionFromAnotherLog(t *testing.T) {
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	ctx := t.Context()
	appendOne := func() EventRef {
		r := EventRef{Version: 1}
		var tx int64
		require.NoError(t, db.Pool().QueryRow(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
			VALUES ('task', gen_random_uuid(), 1, 'task.created', '{}', '{}', now())
			RETURNING tx_id::text::bigint, seq, stream_id::text`).Scan(&tx, &r.Pos.Seq, &r.StreamID))
		r.Pos.TxID = uint64(tx)
		return r
	}
	first, second := appendOne(), appendOne()

	// Positions come from reads below the horizon, which other
	// transactions on the cluster may hold back for a while.
	var end LogEnd
	require.Eventually(t, func() bool {
		end, err = db.ReadLogEnd(ctx, db.Pool())
		require.NoError(t, err)
		return end.Head == second.Pos
	}, 30*time.Second, 20*time.Millisecond)
	require.False(t, end.Behind(first.Pos))
	require.False(t, end.Behind(second.Pos))
	require.True(t, end.Behind(events.Position{TxID: end.XMin}), "a transaction id not handed out yet")
	require.True(t, end.Behind(events.Position{TxID: second.Pos.TxID, Seq: second.Pos.Seq + 1}), "after the head")

	lost := EventRef{Pos: events.Position{TxID: second.Pos.TxID + 100, Seq: second.Pos.Seq + 100}, StreamID: second.StreamID, Version: 2}
	last, ok, err := db.LastHeld(ctx, db.Pool(), []EventRef{first, second, lost})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, second.Pos, last)

	reused := second
	reused.StreamID = first.StreamID // its position, another event
	last, ok, err = db.LastHeld(ctx, db.Pool(), []EventRef{first, reused, lost})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, first.Pos, last)

	_, ok, err = db.LastHeld(ctx, db.Pool(), []EventRef{lost})
	require.NoError(t, err)
	require.False(t, ok)
}
