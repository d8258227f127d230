package reactors_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
)

func (e *env) stuckDetector(instance string, tick time.Duration) *reactors.Stuck {
	e.t.Helper()
	s, err := reactors.NewStuck(reactors.StuckConfig{DB: e.db, InstanceID: instance, Tick: tick,
		OfflineAfter: 10 * time.Minute, StuckAfter: 15 * time.Minute, Logger: e.log})
	require.NoError(e.t, err)
	return s
}

func (e *env) tick(s *reactors.Stuck) reactors.StuckReport {
	e.t.Helper()
	rep, err := s.Tick(e.ctx)
	require.NoError(e.t, err)
	return rep
}

func types(evs []events.Envelope) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// The seed design's story: a worker stops heart-beating while holding a
// task; it goes offline after 10 minutes, its task is failed after 15 with
// the evidence, retried, and the retry is claimed by another worker.
func TestStuckDetector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.retryReactor("a", nil)
	stuck := e.stuckDetector("a", time.Minute)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 3})
	lost := e.worker("Lost Worker", 2)
	rescuer := e.worker("Rescuer", 1)
	task := e.createAssigned(tt, "Long job", "Crunch numbers.", lost)
	claimed := e.claim(lost)
	require.Equal(t, task.ID, claimed.ID)
	startedAt := *claimed.StartedAt
	lastBeat := e.clock.Now()
	e.heartbeat(lost)

	require.Equal(t, reactors.StuckReport{Leader: true}, e.tick(stuck), "nothing to do yet")

	// 11 minutes of silence: offline, but the task has not been in progress
	// for 15 minutes yet.
	e.clock.Advance(11 * time.Minute)
	e.heartbeat(rescuer)
	require.Equal(t, reactors.StuckReport{Leader: true, WentOffline: 1}, e.tick(stuck))
	userEvs := e.stream(lost)
	offline := ofType(userEvs, "worker.went_offline")
	require.Len(t, offline, 1)
	p := offline[0].Payload.(events.WorkerWentOffline)
	require.Equal(t, 600, p.ThresholdSeconds)
	require.Equal(t, 1, p.InProgress)
	beat, err := time.Parse(time.RFC3339Nano, p.LastHeartbeat)
	require.NoError(t, err)
	require.WithinDuration(t, lastBeat, beat, time.Second)
	require.Equal(t, events.Actor{Kind: events.ActorSystem, ID: reactors.StuckLease}, offline[0].Meta.Actor)
	require.Equal(t, events.StatusInProgress, e.get(task.ID).Status)

	// 16 minutes: stuck.
	e.clock.Advance(5 * time.Minute)
	e.heartbeat(rescuer)
	require.Equal(t, reactors.StuckReport{Leader: true, FailedOffline: 1}, e.tick(stuck))
	require.Equal(t, reactors.StuckReport{Leader: true}, e.tick(stuck), "a second tick changes nothing")

	failedEv := ofType(e.stream(task.ID), "task.failed")
	require.Len(t, failedEv, 1)
	f := failedEv[0].Payload.(events.TaskFailed)
	require.Equal(t, events.FailureWorkerOffline, f.Kind)
	require.Equal(t, "Worker Lost Worker went offline", f.Reason)
	require.Equal(t, lost, f.WorkerID)
	var evidence map[string]any
	require.NoError(t, json.Unmarshal(f.Evidence, &evidence))
	require.Equal(t, float64(600), evidence["offline_threshold_seconds"])
	require.Equal(t, float64(900), evidence["stuck_threshold_seconds"])
	require.Equal(t, startedAt.Format(time.RFC3339Nano), evidence["started_at"])
	require.Equal(t, p.LastHeartbeat, evidence["last_heartbeat"])

	failed := e.decided(task.ID)
	require.Equal(t, events.RetryOutcomeRetried, *failed.RetryOutcome)
	retry := e.claim(rescuer)
	require.NotNil(t, retry, "the retry is claimable by another worker")
	require.Equal(t, *failed.RetryTaskID, retry.ID)
	require.Equal(t, "Long job (retry 1)", retry.Title)
	require.Equal(t, "Crunch numbers.\n\nPREVIOUS ATTEMPT FAILED: Worker Lost Worker went offline\nThis is retry 1 of 3.", retry.Description)

	// The lost worker comes back.
	e.heartbeat(lost)
	require.Equal(t, []string{"user.registered", "worker.went_online", "worker.went_offline", "worker.went_online"},
		types(e.stream(lost)))

	// The whole story is in the events.
	evs := e.stream(task.ID)
	require.Equal(t, []string{"task.created", "task.assigned", "task.claimed", "task.failed", "task.update_posted",
		"task.retried", "task.update_posted"}, types(evs))
	require.Equal(t, "Worker Lost Worker went offline. Task marked as failed for retry.",
		evs[4].Payload.(events.TaskUpdatePosted).Message)
	require.Equal(t, []string{"task.created", "task.claimed"}, types(e.stream(retry.ID)))
	require.Equal(t, events.FoldTask(evs), e.get(task.ID))
}

func TestStuckTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.retryReactor("a", nil)
	stuck := e.stuckDetector("a", time.Minute)
	timed := e.taskType(events.TaskTypeSpec{MaxRetries: 1, TimeoutSeconds: 90})
	untimed := e.taskType(events.TaskTypeSpec{MaxRetries: 1})
	w := e.worker("Slow Worker", 2)
	task := e.createAssigned(timed, "Bounded", "", w)
	require.NotNil(t, e.claim(w))
	free := e.createAssigned(untimed, "Unbounded", "", w)
	require.NotNil(t, e.claim(w))

	e.clock.Advance(80 * time.Second)
	e.heartbeat(w)
	require.Equal(t, reactors.StuckReport{Leader: true}, e.tick(stuck))
	e.clock.Advance(11 * time.Second)
	e.heartbeat(w)
	require.Equal(t, reactors.StuckReport{Leader: true, FailedTimedOut: 1}, e.tick(stuck))
	require.Equal(t, reactors.StuckReport{Leader: true}, e.tick(stuck))

	f := ofType(e.stream(task.ID), "task.failed")[0].Payload.(events.TaskFailed)
	require.Equal(t, events.FailureTimeout, f.Kind)
	require.Equal(t, w, f.WorkerID)
	var evidence map[string]any
	require.NoError(t, json.Unmarshal(f.Evidence, &evidence))
	require.Equal(t, float64(90), evidence["timeout_seconds"])
	failed := e.decided(task.ID)
	require.Equal(t, "PREVIOUS ATTEMPT FAILED: Task ran longer than its type's timeout of 90 s\nThis is retry 1 of 1.",
		e.get(*failed.RetryTaskID).Description)
	require.Equal(t, events.StatusInProgress, e.get(free.ID).Status)
}

// One instance acts at a time; another takes over when the lease runs out.
func TestStuckLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.stuckDetector("a", time.Minute)
	b := e.stuckDetector("b", time.Minute)
	require.True(t, e.tick(a).Leader)
	require.False(t, e.tick(b).Leader)
	e.clock.Advance(time.Minute)
	require.True(t, e.tick(a).Leader, "the leader renews")
	require.False(t, e.tick(b).Leader)
	e.clock.Advance(3 * time.Minute) // a died: its lease (2 ticks + 5 s) runs out
	require.True(t, e.tick(b).Leader)
	require.False(t, e.tick(a).Leader)
}
