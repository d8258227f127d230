package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// A position the database has not reached yet can only come from another
// server that was ahead (a failover to a standby that lagged): AuthChanges
// says so instead of waiting there, silently, for transaction ids the new
// server hands out again.
func TestAuthChangesNoticeADatabaseBehindThePosition(t *testing.T) {
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	ctx := t.Context()
	start, err := db.AuthChangesStart(ctx)
	require.NoError(t, err)
	_, next, err := db.AuthChanges(ctx, start, 10)
	require.NoError(t, err)
	require.False(t, next.Less(start))

	ahead := events.Position{TxID: start.TxID + 1_000_000}
	_, got, err := db.AuthChanges(ctx, ahead, 10)
	require.ErrorIs(t, err, ErrLogRewound)
	require.Equal(t, ahead, got)
}
