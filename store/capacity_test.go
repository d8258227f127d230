package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// The dashboard's sums (one statement) are the capacity list's sums: slots
// of every worker, in use, free, and free among the online; a worker silent,
// offline or never heard from adds its free slots to the total only.
func TestCapacityTotalsAreTheListsSums(t *testing.T) {
	e := newBatchEnv(t)
	busy := e.user(t, "busy", true, 2)
	full := e.user(t, "full", true, 1)
	gone := e.user(t, "gone", true, 3)
	e.user(t, "silent", true, 4)
	e.user(t, "admin", false, 0)
	for _, w := range []string{busy, full, gone} {
		_, err := e.db.Heartbeat(e.ctx, w, HeartbeatParams{Status: "idle"}, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
		require.NoError(t, err)
	}
	for range 4 {
		e.task(t, "queued", events.PriorityMedium, "")
	}
	for _, w := range []string{busy, full, gone} {
		got, err := e.db.Claim(e.ctx, w, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
		require.NoError(t, err)
		require.NotNil(t, got)
	}
	_, err := e.db.Heartbeat(e.ctx, gone, HeartbeatParams{Status: HeartbeatOffline}, events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: gone}})
	require.NoError(t, err)

	// The workers come a page at a time, by name; the sums cover them all.
	first, err := e.db.Capacity(e.ctx, AccountFilter{Limit: 3, Role: RoleAny})
	require.NoError(t, err)
	require.Len(t, first.Workers, 3, "workers only, whatever the filter's role")
	require.NotEmpty(t, first.NextCursor)
	rest, err := e.db.Capacity(e.ctx, AccountFilter{Limit: 3, After: first.NextCursor})
	require.NoError(t, err)
	require.Len(t, rest.Workers, 1)
	require.Empty(t, rest.NextCursor)
	sums, err := e.db.CapacityTotals(e.ctx)
	require.NoError(t, err)
	require.Nil(t, sums.Workers)
	first.AccountPage, rest.AccountPage = AccountPage{}, AccountPage{}
	require.Equal(t, first, sums)
	require.Equal(t, rest, sums)
	// busy 2-1, full 1-1, gone 3-1 (offline), silent 4-0 (never heard from).
	require.Equal(t, &Capacity{TotalSlots: 10, UsedSlots: 3, AvailableSlots: 7, OnlineSlots: 1, QueueDepth: 1}, sums)
}
