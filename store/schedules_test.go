package store

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// schedEnv is a fresh database on a movable clock, with one task type.
type schedEnv struct {
	*batchEnv
	offset atomic.Int64
}

func newSchedEnv(t *testing.T) *schedEnv {
	t.Helper()
	e := &schedEnv{}
	ctx := context.Background()
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.Now().Add(time.Duration(e.offset.Load())) }})
	require.NoError(t, err)
	e.batchEnv = &batchEnv{ctx: ctx, db: db, admin: events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: "00000000-0000-0000-0000-000000000001"}}}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl", Label: "Crawl", MaxRetries: 0,
		ParamSchema: []byte(`{"type":"object","required":["ticker"]}`)}, e.admin)
	require.NoError(t, err)
	e.typeID = tt.ID
	return e
}

// at moves the clock so that the store's now is t.
func (e *schedEnv) at(t time.Time) { e.offset.Store(int64(time.Until(t))) }

// requireTicker is a stand-in for the API's schema check.
func requireTicker(_ *events.TaskType, params json.RawMessage) error {
	var p map[string]any
	if err := json.Unmarshal(params, &p); err != nil || p["ticker"] == nil {
		return events.Invalid("params.ticker", "is required")
	}
	return nil
}

func (e *schedEnv) create(t *testing.T, mutate func(*events.ScheduleSpec)) *events.Schedule {
	t.Helper()
	spec := events.ScheduleSpec{Task: events.ScheduleTemplate{TaskTypeID: e.typeID, Title: "crawl NVDA",
		Params: json.RawMessage(`{"ticker":"NVDA"}`)},
		ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}}}
	if mutate != nil {
		mutate(&spec)
	}
	s, err := e.db.CreateSchedule(e.ctx, spec, requireTicker, e.admin)
	require.NoError(t, err)
	return s
}

func (e *schedEnv) fire(t *testing.T) []Firing {
	t.Helper()
	f, err := e.db.FireDue(e.ctx, 100, requireTicker)
	require.NoError(t, err)
	return f
}

func (e *schedEnv) get(t *testing.T, id string) *events.Schedule {
	t.Helper()
	s, err := e.db.GetSchedule(e.ctx, e.db.pool, id)
	require.NoError(t, err)
	return s
}

// requireFold checks that the schedules row equals the fold of its stream.
func (e *schedEnv) requireFold(t *testing.T, id string) {
	t.Helper()
	rows, err := e.db.pool.Query(e.ctx, `SELECT seq, stream_id::text, version, type, data, occurred_at FROM task_events WHERE stream_id = $1 ORDER BY version`, id)
	require.NoError(t, err)
	var stream []events.Envelope
	for rows.Next() {
		var ev events.Envelope
		require.NoError(t, rows.Scan(&ev.Seq, &ev.StreamID, &ev.Version, &ev.Type, &ev.Data, &ev.OccurredAt))
		ev.OccurredAt = ev.OccurredAt.UTC()
		require.NoError(t, ev.Decode())
		stream = append(stream, ev)
	}
	require.NoError(t, rows.Err())
	fold := events.FoldSchedule(stream)
	row := e.get(t, id)
	a, _ := json.Marshal(fold)
	b, _ := json.Marshal(row)
	require.JSONEq(t, string(a), string(b))
}

func TestScheduleFiresOnceAtItsDueTimeWithItsTask(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	s := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start })
	require.Equal(t, start.UTC(), *s.NextDueAt)

	e.at(start.Add(-time.Second))
	require.Empty(t, e.fire(t), "not due yet")

	e.at(start.Add(300 * time.Millisecond))
	fired := e.fire(t)
	require.Len(t, fired, 1)
	require.Equal(t, "fired", fired[0].Kind)
	require.Equal(t, start.UTC(), fired[0].DueAt)
	require.Empty(t, e.fire(t), "a due time fires once")

	task, err := e.db.GetTask(e.ctx, e.db.pool, fired[0].TaskID)
	require.NoError(t, err)
	require.Equal(t, s.ID, *task.ScheduleID)
	require.Equal(t, 1, *task.ScheduleRun)
	require.Equal(t, "crawl NVDA", task.Title)
	s = e.get(t, s.ID)
	require.Equal(t, 1, s.Runs)
	require.Equal(t, start.Add(time.Minute).UTC(), *s.NextDueAt)
	e.requireFold(t, s.ID)

	// The firing and the task.created commit together, in one transaction.
	var txs int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(DISTINCT tx_id) FROM task_events
		WHERE stream_id IN ($1, $2) AND type IN ('schedule.fired', 'task.created')`, s.ID, task.ID).Scan(&txs))
	require.Equal(t, 1, txs)

	// The database refuses a second firing of the same due time.
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO schedule_firings (schedule_id, version, kind, due_at, at) VALUES ($1, 99, 'fired', $2, now())`, s.ID, start)
	require.ErrorIs(t, mapErr(err), events.ErrConflict)
}

func TestMissedRunsCollapseIntoOneFiring(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	s := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow })
	e.at(start.Add(10*time.Minute + 5*time.Second)) // down for ten minutes: eleven slots are due
	fired := e.fire(t)
	require.Len(t, fired, 1)
	require.Equal(t, 10, fired[0].Missed)
	require.Equal(t, start.Add(10*time.Minute).UTC(), fired[0].DueAt, "the latest slot fires")
	s = e.get(t, s.ID)
	require.Equal(t, 1, s.Runs)
	require.Equal(t, start.Add(11*time.Minute).UTC(), *s.NextDueAt)
	var missed int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT missed FROM schedule_firings WHERE schedule_id = $1`, s.ID).Scan(&missed))
	require.Equal(t, 10, missed)
}

func TestOverlapSkipAndAllow(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	skip := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start })
	allow := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow })
	e.at(start)
	require.Len(t, e.fire(t), 2)

	// The first executions are still pending a minute later.
	e.at(start.Add(time.Minute))
	byID := map[string]Firing{}
	for _, f := range e.fire(t) {
		byID[f.ScheduleID] = f
	}
	require.Equal(t, "skipped", byID[skip.ID].Kind)
	require.Contains(t, byID[skip.ID].Reason, "execution #1 has not ended")
	require.Equal(t, "fired", byID[allow.ID].Kind)
	require.Equal(t, 1, e.get(t, skip.ID).Skips)
	require.Equal(t, 2, e.get(t, allow.ID).Runs)

	// Once the execution ended, skip fires again.
	first, err := e.db.ScheduleExecutions(e.ctx, skip.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, first, 1)
	_, _, err = e.db.UpdateTask(e.ctx, e.db.pool, first[0].TaskID, e.admin, func(t *events.Task) ([]events.Payload, error) {
		return t.Cancel(e.admin.Actor.ID, "not needed")
	})
	require.NoError(t, err)
	e.at(start.Add(2 * time.Minute))
	for _, f := range e.fire(t) {
		require.Equal(t, "fired", f.Kind)
	}
	e.requireFold(t, skip.ID)
	exs, err := e.db.ScheduleExecutions(e.ctx, skip.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, exs, 2)
	require.Equal(t, 2, exs[0].Run)
	require.Equal(t, "pending", exs[0].Outcome)
	require.Equal(t, "cancelled", exs[1].Outcome)
	require.NotNil(t, exs[1].FinishedAt)
}

// A template that no longer fits (type archived) records fire_failed, and
// the schedule pauses itself after max_failures of them in a row; other
// schedules fire on.
func TestFireFailedThenAutoPause(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	broken := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.MaxFailures = 2 })
	other, err := e.db.CreateTaskType(e.ctx, events.TaskTypeSpec{Name: "other", Label: "Other"}, e.admin)
	require.NoError(t, err)
	fine := e.create(t, func(sp *events.ScheduleSpec) {
		sp.StartAt = &start
		sp.Overlap = events.OverlapAllow
		sp.Task.TaskTypeID = other.ID
	})
	_, err = e.db.UpdateTaskType(e.ctx, e.typeID, e.admin, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Archive() })
	require.NoError(t, err)

	for i, wantState := range []events.ScheduleState{events.ScheduleStateActive, events.ScheduleStatePaused} {
		e.at(start.Add(time.Duration(i) * time.Minute))
		kinds := map[string]Firing{}
		for _, f := range e.fire(t) {
			kinds[f.ScheduleID] = f
		}
		require.Equal(t, "failed", kinds[broken.ID].Kind)
		require.Contains(t, kinds[broken.ID].Reason, "archived")
		require.Equal(t, "fired", kinds[fine.ID].Kind)
		require.Equal(t, wantState, e.get(t, broken.ID).State)
	}
	s := e.get(t, broken.ID)
	require.True(t, s.AutoPaused)
	require.Contains(t, s.PausedReason, "2 firings in a row")
	e.requireFold(t, broken.ID)
}

// Executions whose retry chains end failed, max_failures in a row, pause
// the schedule with them as evidence; a resume starts counting afresh.
func TestAutoPauseAfterConsecutiveFailedExecutions(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	worker := e.user(t, "w", true, 10)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	s := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.MaxFailures = 2 })
	failNext := func(i int) (paused bool) {
		e.at(start.Add(time.Duration(i) * time.Minute))
		fired := e.fire(t)
		require.Len(t, fired, 1)
		require.Equal(t, "fired", fired[0].Kind)
		id := fired[0].TaskID
		for _, decide := range []TaskDecision{
			func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) },
			func(t *events.Task) ([]events.Payload, error) {
				return t.Fail(worker, events.FailureError, "upstream 500", nil)
			},
			func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(0) },
		} {
			_, _, err := e.db.UpdateTask(e.ctx, e.db.pool, id, e.admin, decide)
			require.NoError(t, err)
		}
		require.NoError(t, e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
			var err error
			paused, err = e.db.PauseFailingSchedule(e.ctx, tx, s.ID, 1)
			return err
		}))
		return paused
	}
	require.False(t, failNext(0))
	require.True(t, failNext(1))
	got := e.get(t, s.ID)
	require.Equal(t, events.ScheduleStatePaused, got.State)
	require.True(t, got.AutoPaused)
	require.Contains(t, got.PausedReason, "2 executions in a row ended failed; the last: upstream 500")
	var evidence json.RawMessage
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT data->'evidence' FROM task_events WHERE stream_id = $1 AND type = 'schedule.paused'`, s.ID).Scan(&evidence))
	require.Contains(t, string(evidence), `"run": 2`)
	require.Contains(t, string(evidence), `"run": 1`)

	st, err := e.db.GetScheduleStats(e.ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, 2, st.Runs)
	require.Equal(t, 2, st.Failed)
	require.InDelta(t, 0.0, *st.SuccessRate, 1e-9)
	require.Equal(t, 2, st.LastFailure.Run)

	// After a resume the old failures no longer count: one more is not enough.
	_, err = e.db.ResumeSchedule(e.ctx, s.ID, e.admin)
	require.NoError(t, err)
	next := *e.get(t, s.ID).NextDueAt
	require.False(t, failNext(int(next.Sub(start)/time.Minute)))
	e.requireFold(t, s.ID)
}

func TestScheduleTransitions(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	s := e.create(t, nil)
	invalid := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, events.ErrInvalidTransition)
	}
	_, err := e.db.ResumeSchedule(e.ctx, s.ID, e.admin)
	invalid(err)
	_, err = e.db.PauseSchedule(e.ctx, s.ID, "maintenance", e.admin)
	require.NoError(t, err)
	_, err = e.db.PauseSchedule(e.ctx, s.ID, "", e.admin)
	invalid(err)
	// Run now works while paused and does not move the regular times.
	before := e.get(t, s.ID)
	after, task, err := e.db.RunScheduleNow(e.ctx, s.ID, requireTicker, e.admin)
	require.NoError(t, err)
	require.Equal(t, 1, after.Runs)
	require.Equal(t, before.NextDueAt, after.NextDueAt)
	require.Equal(t, s.ID, *task.ScheduleID)
	_, err = e.db.CancelSchedule(e.ctx, s.ID, "done", e.admin)
	require.NoError(t, err)
	_, _, err = e.db.RunScheduleNow(e.ctx, s.ID, requireTicker, e.admin)
	invalid(err)
	_, err = e.db.CancelSchedule(e.ctx, s.ID, "", e.admin)
	invalid(err)
	_, err = e.db.UpdateSchedule(e.ctx, s.ID, func(*events.ScheduleSpec) error { return nil }, requireTicker, e.admin)
	invalid(err)
	e.requireFold(t, s.ID)

	_, err = e.db.PauseSchedule(e.ctx, "5b0cbe1e-0000-7000-8000-000000000000", "", e.admin)
	require.ErrorIs(t, err, events.ErrNotFound)
}

func TestCreateScheduleRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour)
	early := start.Add(-time.Minute)
	for _, c := range []struct {
		field  string
		mutate func(*events.ScheduleSpec)
	}{
		{"interval", func(sp *events.ScheduleSpec) { sp.Interval = &events.Interval{Every: 30, Unit: events.UnitSeconds} }},
		{"interval.unit", func(sp *events.ScheduleSpec) { sp.Interval = &events.Interval{Every: 3, Unit: "weeks"} }},
		{"time_zone", func(sp *events.ScheduleSpec) { sp.Interval, sp.Cron, sp.TimeZone = nil, "0 6 * * *", "Europe/Atlantis" }},
		{"cron", func(sp *events.ScheduleSpec) { sp.Interval, sp.Cron = nil, "0 25 * * *" }},
		{"end_at", func(sp *events.ScheduleSpec) { sp.StartAt, sp.EndAt = &start, &early }},
		{"task.task_type_id", func(sp *events.ScheduleSpec) { sp.Task.TaskTypeID = "0199f5a0-0000-7000-8000-000000000000" }},
		{"task.params.ticker", func(sp *events.ScheduleSpec) { sp.Task.Params = json.RawMessage(`{}`) }},
		{"start_at", func(sp *events.ScheduleSpec) { sp.Interval = nil }},
		{"overlap", func(sp *events.ScheduleSpec) { sp.Overlap = "queue" }},
	} {
		spec := events.ScheduleSpec{Task: events.ScheduleTemplate{TaskTypeID: e.typeID, Title: "x",
			Params: json.RawMessage(`{"ticker":"A"}`)},
			ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 5, Unit: events.UnitMinutes}}}
		c.mutate(&spec)
		_, err := e.db.CreateSchedule(e.ctx, spec, requireTicker, e.admin)
		field, named := events.FieldOf(err)
		require.True(t, named, "%s: %v", c.field, err)
		assert.Equal(t, c.field, field, err.Error())
	}
	var n int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM schedules`).Scan(&n))
	require.Zero(t, n, "nothing stored")
}

// Many schedules due at once, fired by concurrent callers (as several
// instances would): each due time fires exactly once.
func TestConcurrentFiringFiresEachDueTimeOnce(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	const n = 60
	for range n {
		e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow })
	}
	for minute := range 3 {
		e.at(start.Add(time.Duration(minute) * time.Minute))
		var wg sync.WaitGroup
		var total atomic.Int64
		for range 6 {
			wg.Go(func() {
				f, err := e.db.FireDue(e.ctx, 7, requireTicker)
				for err == nil && len(f) > 0 {
					total.Add(int64(len(f)))
					f, err = e.db.FireDue(e.ctx, 7, requireTicker)
				}
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		require.EqualValues(t, n, total.Load(), "minute %d", minute)
	}
	var fired, tasks, dup int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events WHERE type = 'schedule.fired'`).Scan(&fired))
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM worker_tasks WHERE schedule_id IS NOT NULL`).Scan(&tasks))
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM (SELECT schedule_id, due_at FROM schedule_firings GROUP BY 1, 2 HAVING count(*) > 1) d`).Scan(&dup))
	require.Equal(t, 3*n, fired)
	require.Equal(t, 3*n, tasks)
	require.Zero(t, dup)
}

// A schedule whose stored timing no longer parses is paused with the
// reason; the others in the same batch fire.
func TestBrokenTimingPausesOnlyThatSchedule(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	broken := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start })
	fine := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start })
	_, err := e.db.pool.Exec(e.ctx, `UPDATE schedules SET spec = jsonb_set(spec, '{cron}', '"not cron"') WHERE id = $1`, broken.ID)
	require.NoError(t, err)
	e.at(start)
	byID := map[string]Firing{}
	for _, f := range e.fire(t) {
		byID[f.ScheduleID] = f
	}
	require.Equal(t, "fired", byID[fine.ID].Kind)
	require.True(t, byID[broken.ID].AutoPaused)
	s := e.get(t, broken.ID)
	require.Equal(t, events.ScheduleStatePaused, s.State)
	require.Contains(t, s.PausedReason, "timing is no longer valid: cron:")
}

// storeLikeOldReleases stores a schedule the way releases before the date
// checks did for a start_at they accepted: created with its anchor and first
// slot at start_at, whatever its year.
func (e *schedEnv) storeLikeOldReleases(t *testing.T, start time.Time) string {
	t.Helper()
	spec := events.ScheduleSpec{Name: "typo " + start.Format("2006"), Overlap: events.OverlapAllow, MaxFailures: 3,
		Task: events.ScheduleTemplate{TaskTypeID: e.typeID, Title: "crawl", Params: json.RawMessage(`{"ticker":"X"}`),
			Priority: events.PriorityMedium},
		ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes},
			TimeZone: "UTC", StartAt: &start}}
	id, err := uuid.NewV7()
	require.NoError(t, err)
	_, _, err = appendStream(e.ctx, e.db, e.db.pool, events.StreamSchedule, id.String(), nil,
		[]events.Payload{events.ScheduleCreated{ScheduleSpec: spec, Anchor: start, NextDueAt: &start}},
		e.admin, e.db.projector.Schedule, nil)
	require.NoError(t, err)
	return id.String()
}

// Schedules stored with a start_at in year 0026, 0001 or 1700 (accepted
// before dates were checked), and one whose due time was handled already
// (what the old interval maths left behind), each fail alone: recorded
// against that schedule and paused, while the others fire on, now and at
// their next slots.
func TestBadSchedulesFailAlone(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	healthy := []string{e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow }).ID}
	bad := map[string]string{} // id: what its pause says
	for _, year := range []int{26, 1, 1700} {
		bad[e.storeLikeOldReleases(t, time.Date(year, 5, 1, 6, 0, 0, 0, time.UTC))] = "start_at: must be a date in the years 1970 to 9999"
	}
	refused := e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow })
	healthy = append(healthy, e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow }).ID)

	// The refused one fires once, then its row is set back to that due time.
	e.at(start.Add(-time.Minute))
	_, _, err := e.db.RunScheduleNow(e.ctx, refused.ID, requireTicker, e.admin)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO schedule_firings (schedule_id, version, kind, due_at, at) VALUES ($1, 99, 'fired', $2, now())`, refused.ID, start)
	require.NoError(t, err)
	bad[refused.ID] = "this schedule's due time was fired already"

	for minute := range 3 {
		e.at(start.Add(time.Duration(minute) * time.Minute))
		byID := map[string]Firing{}
		for _, f := range e.fire(t) {
			byID[f.ScheduleID] = f
		}
		for _, id := range healthy {
			require.Equal(t, "fired", byID[id].Kind, "minute %d: a healthy schedule fires", minute)
		}
		for id, reason := range bad {
			if minute > 0 {
				require.NotContains(t, byID, id, "a paused schedule stays out of the way")
				continue
			}
			require.Equal(t, "failed", byID[id].Kind, reason)
			require.True(t, byID[id].AutoPaused, reason)
			s := e.get(t, id)
			require.Equal(t, events.ScheduleStatePaused, s.State)
			require.True(t, s.AutoPaused)
			require.Contains(t, s.PausedReason, reason)
		}
	}
	for id := range bad {
		if id != refused.ID {
			e.requireFold(t, id)
			var failed int
			require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM schedule_firings WHERE schedule_id = $1 AND kind = 'failed'`, id).Scan(&failed))
			require.Equal(t, 1, failed, "the failed slot is recorded")
		}
	}

	// Given a start_at in range, a failed one is resumed and fires.
	var typo string
	for id, reason := range bad {
		if id != refused.ID && strings.Contains(reason, "start_at") {
			typo = id
		}
	}
	fixed := start.Add(10 * time.Minute).UTC()
	_, err = e.db.UpdateSchedule(e.ctx, typo, func(sp *events.ScheduleSpec) error { sp.StartAt = &fixed; return nil }, requireTicker, e.admin)
	require.NoError(t, err)
	resumed, err := e.db.ResumeSchedule(e.ctx, typo, e.admin)
	require.NoError(t, err)
	require.Equal(t, fixed, *resumed.NextDueAt)
	e.at(fixed)
	fired := map[string]string{}
	for _, f := range e.fire(t) {
		fired[f.ScheduleID] = f.Kind
	}
	require.Equal(t, "fired", fired[typo])
	e.requireFold(t, typo)
}

// A schedule whose row is out of step with its stream can be neither fired
// nor paused (every event it would append takes a version already used):
// the error is reported, and the schedules due with it fire all the same.
func TestUnpausableScheduleDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t)
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	var ids []string
	for range 3 {
		ids = append(ids, e.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.Overlap = events.OverlapAllow }).ID)
	}
	stuck := ids[1]
	_, err := e.db.pool.Exec(e.ctx, `UPDATE schedules SET version = version - 1 WHERE id = $1`, stuck)
	require.NoError(t, err)
	e.at(start)
	fired, err := e.db.FireDue(e.ctx, 100, requireTicker)
	require.ErrorIs(t, err, events.ErrConflict)
	kinds := map[string]string{}
	for _, f := range fired {
		kinds[f.ScheduleID] = f.Kind
	}
	require.Equal(t, map[string]string{ids[0]: "fired", ids[2]: "fired"}, kinds)
	require.Equal(t, events.ScheduleStateActive, e.get(t, stuck).State)
}
