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

// A rebuild recounts schedule_counts from the tasks: a wrong count, a
// missing schedule and a bogus row, each reported by verify, are repaired
// (durations and the last failure as they were), an execution that ends
// while the rebuild runs is caught up, and the write path keeps the
// swapped table exact.
func TestScheduleCountsVerifiedAndRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	admin := events.Meta{Actor: events.System("test")}
	worker, err := db.CreateUser(ctx, events.UserRegistered{Email: "w@example.com", FullName: "Worker", IsWorker: true, MaxConcurrentTasks: 10},
		"worker-password", "x", admin)
	require.NoError(t, err)
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl"}, admin)
	require.NoError(t, err)
	start := time.Now().Add(time.Hour)
	var ids []string
	for range 2 {
		s, err := db.CreateSchedule(ctx, events.ScheduleSpec{Name: "s", Overlap: events.OverlapAllow,
			Task:           events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "crawl", Params: json.RawMessage(`{"n":1}`)},
			ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitHours}, StartAt: &start}},
			nil, admin)
		require.NoError(t, err)
		ids = append(ids, s.ID)
	}
	do := func(id string, decide store.TaskDecision) {
		t.Helper()
		_, _, err := db.UpdateTask(ctx, pool, id, admin, decide)
		require.NoError(t, err)
	}
	run := func(schedule, outcome string) {
		t.Helper()
		_, task, err := db.RunScheduleNow(ctx, schedule, nil, admin)
		require.NoError(t, err)
		switch outcome {
		case "completed":
			do(task.ID, func(x *events.Task) ([]events.Payload, error) { return x.Claim(worker.ID) })
			_, _, err := db.CompleteTask(ctx, task.ID, worker.ID, admin)
			require.NoError(t, err)
		case "failed":
			do(task.ID, func(x *events.Task) ([]events.Payload, error) { return x.Claim(worker.ID) })
			do(task.ID, func(x *events.Task) ([]events.Payload, error) {
				return x.Fail(worker.ID, events.FailureError, "upstream 500", nil)
			})
			do(task.ID, func(x *events.Task) ([]events.Payload, error) { return x.RetriesExhausted(0) })
		case "cancelled":
			do(task.ID, func(x *events.Task) ([]events.Payload, error) { return x.Cancel(admin.Actor.ID, "not needed") })
		}
	}
	for _, o := range []string{"completed", "failed", "completed", "cancelled"} {
		run(ids[0], o)
	}
	for _, o := range []string{"cancelled", "completed", "failed"} {
		run(ids[1], o)
	}
	stats := func(id string) *store.ScheduleStats {
		t.Helper()
		st, err := db.GetScheduleStats(ctx, id)
		require.NoError(t, err)
		return st
	}
	before := stats(ids[0])
	require.Equal(t, 2, before.Completed)
	require.NotNil(t, before.LastFailure)
	require.NotNil(t, before.AvgDurationSeconds)
	requireClean(t, verify(t, pool))

	bogus := "00000000-0000-0000-0000-0000000000b0"
	for _, sql := range []string{
		`UPDATE schedule_counts SET completed = completed + 3 WHERE schedule_id = '` + ids[0] + `'`,
		`DELETE FROM schedule_counts WHERE schedule_id = '` + ids[1] + `'`,
		`INSERT INTO schedule_counts (schedule_id, pid, failed) VALUES ('` + bogus + `', 4242, 2)`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	rep := verify(t, pool)
	changed := map[string][]string{}
	for _, d := range rep.Differences {
		require.Equal(t, "schedule_counts", d.Table, "%+v", rep.Differences)
		changed[d.Key] = d.Changed
	}
	require.Equal(t, map[string][]string{
		"schedule_id=" + ids[0] + " (sum over its rows)": {"completed"},
		"schedule_id=" + ids[1] + " (sum over its rows)": {"completed", "failed", "cancelled"},
		"schedule_id=" + bogus + " (sum over its rows)":  {"failed"},
	}, changed)

	// After the load, an execution ends and a failed one is retried by
	// hand (its failure taken back): the catch-up counts both.
	_, pending, err := db.RunScheduleNow(ctx, ids[1], nil, admin)
	require.NoError(t, err)
	var failed string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM worker_tasks WHERE schedule_id = $1 AND status = 'failed'`, ids[1]).Scan(&failed))
	ended := false
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{Progress: func(p replay.Progress) {
		if p.Phase == "index" && !ended {
			ended = true
			do(pending.ID, func(x *events.Task) ([]events.Payload, error) { return x.Cancel(admin.Actor.ID, "late") })
			_, err := db.CreateRetry(ctx, pool, failed, store.RetryParams{Hint: "once more", Manual: true, Meta: admin})
			require.NoError(t, err)
		}
	}})
	require.NoError(t, err)
	require.True(t, ended)
	requireClean(t, verify(t, pool))
	require.Equal(t, before, stats(ids[0]), "durations and the last failure recounted as they were")
	st := stats(ids[1])
	require.Equal(t, 2, st.Cancelled)
	require.Equal(t, 0, st.Failed)
	require.EqualValues(t, 0, count(t, pool, `SELECT count(*) FROM schedule_counts WHERE schedule_id = $1`, bogus))
	require.EqualValues(t, 0, count(t, pool, `SELECT count(*) FROM schedule_counts WHERE pid <> 0`))

	// The write path adds to the swapped table.
	run(ids[0], "failed")
	run(ids[1], "completed")
	requireClean(t, verify(t, pool))
	after := stats(ids[0])
	require.Equal(t, before.Failed+1, after.Failed)
	require.Equal(t, 5, after.LastFailure.Run) // runs 1 to 4 before the rebuild
	require.Equal(t, 2, stats(ids[1]).Completed)
}
