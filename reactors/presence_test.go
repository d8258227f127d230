package reactors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
)

// silentWorker registers a worker that never sends a heartbeat.
func (e *env) silentWorker(name string) string {
	e.t.Helper()
	u, err := e.db.CreateUser(e.ctx, events.UserRegistered{Email: strings.ToLower(strings.ReplaceAll(name, " ", ".")) + "@workers.example.com",
		FullName: name, IsWorker: true, MaxConcurrentTasks: 1}, "worker-password", "not-a-real-hash", system)
	require.NoError(e.t, err)
	return u.ID
}

// A worker that claims tasks but never sends a heartbeat goes offline too
// (rule never_heard), not only its tasks failing; once, however often the
// detector looks.
func TestStuckDetectorNeverHeardWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stuck := e.stuckDetector("a", time.Minute)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 0})
	mute := e.silentWorker("Mute Worker")
	idle := e.silentWorker("Idle Worker") // never heard, holds nothing: stays as it is
	e.createAssigned(tt, "Quiet job", "", mute)
	claimed := e.claim(mute)

	e.clock.Advance(9 * time.Minute)
	require.Equal(t, reactors.StuckReport{Leader: true}, e.tick(stuck), "claimed 9 minutes ago: not yet")
	e.clock.Advance(2 * time.Minute)
	require.Equal(t, reactors.StuckReport{Leader: true, WentOffline: 1}, e.tick(stuck))
	offline := ofType(e.stream(mute), "worker.went_offline")
	require.Len(t, offline, 1)
	p := offline[0].Payload.(events.WorkerWentOffline)
	require.Equal(t, events.OfflineNeverHeard, p.Rule)
	require.Empty(t, p.LastHeartbeat)
	last, err := time.Parse(time.RFC3339Nano, p.LastClaim)
	require.NoError(t, err)
	require.WithinDuration(t, *claimed.StartedAt, last, time.Millisecond)
	require.Empty(t, ofType(e.stream(idle), "worker.went_offline"))

	e.clock.Advance(5 * time.Minute)
	require.Equal(t, reactors.StuckReport{Leader: true, FailedOffline: 1}, e.tick(stuck))
	require.Equal(t, reactors.StuckReport{Leader: true}, e.tick(stuck), "a second tick changes nothing")
	require.Len(t, ofType(e.stream(mute), "worker.went_offline"), 1)
}

// A heartbeat that says offline takes the worker offline at once, with the
// event; the next ordinary heartbeat brings it back.
func TestHeartbeatSaysOffline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker("Leaving Worker", 1)
	e.heartbeat(w)
	online := func() bool {
		ws, err := e.db.ListAccounts(e.ctx, store.RoleWorker)
		require.NoError(t, err)
		for _, v := range ws {
			if v.ID == w {
				return v.Online
			}
		}
		t.Fatalf("worker %s not listed", w)
		return false
	}
	require.True(t, online())
	_, err := e.db.Heartbeat(e.ctx, w, store.HeartbeatParams{Status: store.HeartbeatOffline},
		events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}})
	require.NoError(t, err)
	require.False(t, online(), "offline at once, not after the silence threshold")
	offline := ofType(e.stream(w), "worker.went_offline")
	require.Len(t, offline, 1)
	require.Equal(t, events.OfflineHeartbeatSaidSo, offline[0].Payload.(events.WorkerWentOffline).Rule)
	e.heartbeat(w)
	require.True(t, online())
	require.Len(t, ofType(e.stream(w), "worker.went_online"), 2)
}
