package reactors_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
)

func (e *env) schedule(spec events.ScheduleSpec) *events.Schedule {
	e.t.Helper()
	s, err := e.db.CreateSchedule(e.ctx, spec, nil, events.Meta{Actor: events.System("test")})
	require.NoError(e.t, err)
	return s
}

// The scheduler's timer fires a schedule created while it waits (the
// creation's commit wakes it through the hub) at its due time, not before.
func TestSchedulerFiresAtTheDueTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{Name: "tick"})
	s, err := reactors.NewScheduler(reactors.SchedulerConfig{DB: e.db, Hub: e.hub, CatchUp: time.Hour, Registerer: e.reg, Logger: e.log})
	require.NoError(t, err)
	e.goRun(s.Run)
	time.Sleep(50 * time.Millisecond) // the scheduler is idle, its timer unset

	due := e.clock.Now().Add(400 * time.Millisecond).UTC().Truncate(time.Microsecond)
	sc := e.schedule(events.ScheduleSpec{Task: events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "once", Params: json.RawMessage(`{}`)},
		ScheduleTiming: events.ScheduleTiming{StartAt: &due}})
	var fired time.Time
	e.eventually("the one-time schedule fired", func() bool {
		var at *time.Time
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT max(at) FROM schedule_firings WHERE schedule_id = $1`, sc.ID).Scan(&at))
		if at != nil {
			fired = *at
		}
		return at != nil
	})
	require.False(t, fired.Before(due), "fired at %s, due %s", fired, due)
	require.Less(t, fired.Sub(due), 500*time.Millisecond, "a timer, not a poller")
	got, err := e.db.GetSchedule(e.ctx, e.pool, sc.ID)
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStateFinished, got.State)
	// Counted after the firing's commit: the row can be seen first.
	e.eventually("the firing counted", func() bool { return firings(t, e, "fired") == 1 })
}

// firings reads the scheduler's firings counter for outcome; 0 before the
// first.
func firings(t *testing.T, e *env, outcome string) float64 {
	v, _ := series(t, e, "taskservice_schedule_firings_total", "outcome", outcome)
	return v
}

// The reactor pauses a schedule after max_failures executions in a row
// ended failed, once, with the evidence.
func TestScheduleFailuresReactorPauses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{Name: "flaky", MaxRetries: 0})
	worker := e.worker("w", 5)
	sc := e.schedule(events.ScheduleSpec{Task: events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "flaky", Params: json.RawMessage(`{}`)},
		ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}},
		Overlap:        events.OverlapAllow, MaxFailures: 2})
	retry, err := reactors.NewRetry(reactors.RetryConfig{DB: e.db, InstanceID: "one", Logger: e.log})
	require.NoError(t, err)
	e.runner("one", append(retry.Reactors(), reactors.ScheduleFailures(e.db, e.log))...)
	for i := range 2 {
		fired, err := e.db.FireDue(e.ctx, 10, nil)
		require.NoError(t, err)
		require.Len(t, fired, 1, "firing %d", i)
		e.claim(worker)
		e.fail(worker, fired[0].TaskID, "the API is gone")
		e.clock.Advance(time.Minute)
	}
	e.eventually("the schedule paused itself", func() bool {
		s, err := e.db.GetSchedule(e.ctx, e.pool, sc.ID)
		require.NoError(t, err)
		return s.State == events.ScheduleStatePaused
	})
	s, err := e.db.GetSchedule(e.ctx, e.pool, sc.ID)
	require.NoError(t, err)
	require.True(t, s.AutoPaused)
	require.Contains(t, s.PausedReason, "2 executions in a row ended failed; the last: the API is gone")
}
