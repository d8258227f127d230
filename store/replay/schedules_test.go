package replay_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// Schedules, their firings and the tasks they created are rebuilt by
// replay and checked by verify like every other projection.
func TestVerifyAndRebuildWithSchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	var offset atomic.Int64
	db, err := store.New(pool, store.Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	admin := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl"}, admin)
	require.NoError(t, err)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	var ids []string
	for i, overlap := range []string{events.OverlapSkip, events.OverlapAllow, events.OverlapAllow} {
		s, err := db.CreateSchedule(ctx, events.ScheduleSpec{Name: "s", Overlap: overlap,
			Task:           events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "crawl", Params: json.RawMessage(`{"n":1}`)},
			ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: i + 1, Unit: events.UnitMinutes}, StartAt: &start}},
			nil, admin)
		require.NoError(t, err)
		ids = append(ids, s.ID)
	}
	for m := range 5 {
		offset.Store(int64(time.Until(start.Add(time.Duration(m)*time.Minute + time.Second))))
		_, err := db.FireDue(ctx, 100, nil)
		require.NoError(t, err)
	}
	_, err = db.PauseSchedule(ctx, ids[1], "maintenance", admin)
	require.NoError(t, err)
	_, err = db.CancelSchedule(ctx, ids[2], "", admin)
	require.NoError(t, err)
	_, _, err = db.RunScheduleNow(ctx, ids[0], nil, admin)
	require.NoError(t, err)
	for _, typ := range []string{"schedule.fired", "schedule.skipped", "schedule.paused", "schedule.cancelled"} {
		require.Positive(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = $1`, typ), typ)
	}

	rep := verify(t, pool)
	requireClean(t, rep)
	require.EqualValues(t, 3, rep.Tables["schedules"].Rows)
	require.Equal(t, count(t, pool, `SELECT count(*) FROM schedule_firings`), rep.Tables["schedule_firings"].Rows)

	_, err = pool.Exec(ctx, `UPDATE schedules SET runs = 42 WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM schedule_firings WHERE schedule_id = $1 AND version = 2`, ids[1])
	require.NoError(t, err)
	rep = verify(t, pool)
	require.False(t, rep.Clean())
	tables := map[string]bool{}
	for _, d := range rep.Differences {
		tables[d.Table] = true
	}
	require.True(t, tables["schedules"] && tables["schedule_firings"], "%+v", rep.Differences)

	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))
	// The scheduler works on the swapped tables, unique index included.
	offset.Store(int64(time.Until(start.Add(10 * time.Minute))))
	fired, err := db.FireDue(ctx, 100, nil)
	require.NoError(t, err)
	require.NotEmpty(t, fired)
	var indexes int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname = 'schedule_firings_once'`).Scan(&indexes))
	require.Equal(t, 1, indexes)
	requireClean(t, verify(t, pool))
}

// The firing rows a schedule's history no longer keeps were deleted on
// purpose: verify does not report them, a rebuild does not bring them
// back, and a row deleted by anything else is still a difference.
func TestPrunedFiringsStayOutOfReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	var offset atomic.Int64
	db, err := store.New(pool, store.Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	admin := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl"}, admin)
	require.NoError(t, err)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	s, err := db.CreateSchedule(ctx, events.ScheduleSpec{Name: "s", Overlap: events.OverlapAllow,
		Task:           events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "crawl", Params: json.RawMessage(`{"n":1}`)},
		ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}, StartAt: &start}},
		nil, admin)
	require.NoError(t, err)
	for m := range 6 {
		offset.Store(int64(time.Until(start.Add(time.Duration(m)*time.Minute + time.Second))))
		_, err := db.FireDue(ctx, 100, nil)
		require.NoError(t, err)
	}
	rep, err := db.PruneScheduleHistory(ctx, store.HistoryLimits{Days: 30, Runs: 2})
	require.NoError(t, err)
	require.EqualValues(t, 4, rep.Firings)
	require.EqualValues(t, 2, count(t, pool, `SELECT count(*) FROM schedule_firings`))
	requireClean(t, verify(t, pool))

	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.EqualValues(t, 2, count(t, pool, `SELECT count(*) FROM schedule_firings`), "the rebuild keeps them out")
	requireClean(t, verify(t, pool))

	_, err = pool.Exec(ctx, `DELETE FROM schedule_firings WHERE schedule_id = $1 AND run = 6`, s.ID)
	require.NoError(t, err)
	v := verify(t, pool)
	require.False(t, v.Clean(), "a kept row that is missing is still a difference")
	require.Equal(t, "schedule_firings", v.Differences[0].Table)
}

// Verify recounts each schedule's ended executions from the tasks and
// reports a schedule whose counters disagree.
func TestVerifyChecksScheduleCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	admin := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl"}, admin)
	require.NoError(t, err)
	start := time.Now().Add(time.Hour)
	s, err := db.CreateSchedule(ctx, events.ScheduleSpec{Name: "s",
		Task:           events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "crawl", Params: json.RawMessage(`{"n":1}`)},
		ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitHours}, StartAt: &start}},
		nil, admin)
	require.NoError(t, err)
	_, task, err := db.RunScheduleNow(ctx, s.ID, nil, admin)
	require.NoError(t, err)
	_, _, err = db.UpdateTask(ctx, pool, task.ID, admin, func(x *events.Task) ([]events.Payload, error) {
		return x.Cancel(admin.Actor.ID, "not needed")
	})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))

	_, err = pool.Exec(ctx, `UPDATE schedule_counts SET cancelled = cancelled + 2 WHERE schedule_id = $1`, s.ID)
	require.NoError(t, err)
	v := verify(t, pool)
	require.False(t, v.Clean())
	require.Equal(t, "schedule_counts", v.Differences[0].Table)
	require.Equal(t, []string{"cancelled"}, v.Differences[0].Changed)
}
