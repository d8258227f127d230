package store

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// historyEnv is a schedule environment on a clock that stands still, so
// the days limit can be tested to the microsecond.
type historyEnv struct {
	*schedEnv
	now    atomic.Int64
	worker string
}

func newHistoryEnv(t *testing.T, start time.Time) *historyEnv {
	t.Helper()
	h := &historyEnv{schedEnv: &schedEnv{}}
	h.now.Store(start.UnixMicro())
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.UnixMicro(h.now.Load()) }})
	require.NoError(t, err)
	ctx := context.Background()
	h.batchEnv = &batchEnv{ctx: ctx, db: db, admin: events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: "00000000-0000-0000-0000-000000000001"}}}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl", Label: "Crawl", MaxRetries: 0,
		ParamSchema: []byte(`{"type":"object","required":["ticker"]}`)}, h.admin)
	require.NoError(t, err)
	h.typeID = tt.ID
	h.worker = h.user(t, "w", true, 100)
	return h
}

func (h *historyEnv) set(at time.Time) { h.now.Store(at.UnixMicro()) }

// fireAt fires the schedule's due time at (a one-minute interval from
// start) and returns the execution's task.
func (h *historyEnv) fireAt(t *testing.T, at time.Time) string {
	t.Helper()
	h.set(at)
	fired := h.fire(t)
	require.Len(t, fired, 1)
	require.Equal(t, "fired", fired[0].Kind)
	return fired[0].TaskID
}

func (h *historyEnv) do(t *testing.T, id string, decide TaskDecision) {
	t.Helper()
	_, _, err := h.db.UpdateTask(h.ctx, h.db.pool, id, h.admin, decide)
	require.NoError(t, err)
}

func (h *historyEnv) claim(t *testing.T, id string) {
	h.do(t, id, func(x *events.Task) ([]events.Payload, error) { return x.Claim(h.worker) })
}

// end ends an execution's task as outcome says, a second after its start.
func (h *historyEnv) end(t *testing.T, id, outcome string) {
	t.Helper()
	switch outcome {
	case "completed": // through the batched completion
		h.claim(t, id)
		h.now.Add(int64(time.Second / time.Microsecond))
		_, _, err := h.db.CompleteTask(h.ctx, id, h.worker, h.admin)
		require.NoError(t, err)
	case "failed":
		h.claim(t, id)
		h.now.Add(int64(time.Second / time.Microsecond))
		h.do(t, id, func(x *events.Task) ([]events.Payload, error) {
			return x.Fail(h.worker, events.FailureError, "upstream 500 at "+id, nil)
		})
		h.do(t, id, func(x *events.Task) ([]events.Payload, error) { return x.RetriesExhausted(0) })
	case "cancelled":
		h.do(t, id, func(x *events.Task) ([]events.Payload, error) { return x.Cancel(h.admin.Actor.ID, "not needed") })
	case "pending":
	}
}

func (h *historyEnv) prune(t *testing.T, days, runs int) PruneReport {
	t.Helper()
	rep, err := h.db.PruneScheduleHistory(h.ctx, HistoryLimits{Days: days, Runs: runs})
	require.NoError(t, err)
	require.False(t, rep.Skipped)
	return rep
}

func (h *historyEnv) keptRuns(t *testing.T, id string) []int {
	t.Helper()
	exs, err := h.db.ScheduleExecutions(h.ctx, id, 0, 500)
	require.NoError(t, err)
	runs := []int{}
	for _, e := range exs {
		runs = append(runs, e.Run)
	}
	return runs
}

func (h *historyEnv) firingVersions(t *testing.T, id string) []int {
	t.Helper()
	var vs []int
	rows, err := h.db.pool.Query(h.ctx, `SELECT version FROM schedule_firings WHERE schedule_id = $1 ORDER BY version`, id)
	require.NoError(t, err)
	for rows.Next() {
		var v int
		require.NoError(t, rows.Scan(&v))
		vs = append(vs, v)
	}
	require.NoError(t, rows.Err())
	return vs
}

// scannedStats is what the stats were before counters: a scan of every
// execution the schedule's tasks make.
func (h *historyEnv) scannedStats(t *testing.T, id string) (completed, failed, cancelled int, avg *float64, lastRun *int) {
	t.Helper()
	sql := strings.Replace(strings.Replace(executionsSQL, "%s", "", 1), "%s", "", 1) + `
	SELECT count(*) FILTER (WHERE outcome = 'completed')::int, count(*) FILTER (WHERE outcome = 'failed')::int,
	       count(*) FILTER (WHERE outcome = 'cancelled')::int,
	       avg(extract(epoch FROM completed_at - started_at)::float8) FILTER (WHERE outcome IN ('completed', 'failed', 'cancelled')),
	       max(run) FILTER (WHERE outcome = 'failed')
	  FROM executions`
	require.NoError(t, h.db.pool.QueryRow(h.ctx, sql, id).Scan(&completed, &failed, &cancelled, &avg, &lastRun))
	return
}

func (h *historyEnv) requireCountersMatchScan(t *testing.T, id string) *ScheduleStats {
	t.Helper()
	st, err := h.db.GetScheduleStats(h.ctx, id)
	require.NoError(t, err)
	c, f, x, avg, last := h.scannedStats(t, id)
	require.Equal(t, []int{c, f, x}, []int{st.Completed, st.Failed, st.Cancelled}, "counters = the scan")
	if avg == nil {
		require.Nil(t, st.AvgDurationSeconds)
	} else {
		require.InDelta(t, *avg, *st.AvgDurationSeconds, 1e-6)
	}
	if last != nil { // a failure undone by a manual retry stays recorded
		require.Equal(t, *last, st.LastFailure.Run)
	}
	return st
}

// The runs limit keeps exactly the last runs; pruning deletes the firing
// rows before them, changes no stat, and runs again as a no-op.
func TestPruneScheduleHistoryKeepsTheLastRuns(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	h := newHistoryEnv(t, start.Add(-time.Hour))
	s := h.create(t, func(sp *events.ScheduleSpec) {
		sp.StartAt, sp.MaxFailures, sp.Overlap = &start, 0, events.OverlapAllow
	})
	outcomes := []string{"completed", "failed", "cancelled", "completed", "failed", "completed", "completed", "pending"}
	for i, o := range outcomes {
		h.end(t, h.fireAt(t, start.Add(time.Duration(i)*time.Minute)), o)
	}
	before := h.requireCountersMatchScan(t, s.ID)
	require.Equal(t, 8, before.Runs)
	require.Equal(t, 1, before.Unfinished)
	require.Equal(t, 5, before.LastFailure.Run)
	require.Equal(t, []int{8, 7, 6, 5, 4, 3, 2, 1}, h.keptRuns(t, s.ID))
	versions := h.firingVersions(t, s.ID)
	require.Len(t, versions, 8)

	rep := h.prune(t, 30, 3)
	require.Equal(t, int64(5), rep.Firings)
	require.Equal(t, []int{8, 7, 6}, h.keptRuns(t, s.ID), "exactly the last three runs")
	require.Equal(t, versions[5:], h.firingVersions(t, s.ID))
	after, err := h.db.GetScheduleStats(h.ctx, s.ID)
	require.NoError(t, err)
	before.P95DurationSeconds, after.P95DurationSeconds = nil, nil // over the kept history only
	require.Equal(t, before, after, "pruning changes no counter")

	require.Equal(t, int64(0), h.prune(t, 30, 3).Firings, "a second pass has nothing to do")
	require.Equal(t, []int{8, 7, 6}, h.keptRuns(t, s.ID))

	// As many runs kept as there are: nothing goes.
	h.end(t, h.fireAt(t, start.Add(8*time.Minute)), "completed")
	require.Equal(t, int64(1), h.prune(t, 30, 3).Firings)
	require.Equal(t, []int{9, 8, 7}, h.keptRuns(t, s.ID))
	h.requireCountersMatchScan(t, s.ID)
	var rows int
	require.NoError(t, h.db.pool.QueryRow(h.ctx, `SELECT count(*) FROM schedule_counts WHERE schedule_id = $1`, s.ID).Scan(&rows))
	require.Equal(t, 1, rows, "the pass folds the counter rows into one")
	var events int
	require.NoError(t, h.db.pool.QueryRow(h.ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1`, s.ID).Scan(&events))
	require.Equal(t, 1+9, events, "the log keeps every firing")
}

// The days limit: a run fired exactly at the cut-off stays, one a
// microsecond older goes; skips follow the same cut-off; the newest firing
// row stays whatever its age.
func TestPruneScheduleHistoryByAgeToTheMicrosecond(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	h := newHistoryEnv(t, start.Add(-time.Hour))
	s := h.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start })
	for i := range 4 {
		h.end(t, h.fireAt(t, start.Add(time.Duration(i)*time.Minute)), "completed")
	}
	before := h.requireCountersMatchScan(t, s.ID)
	day := 24 * time.Hour
	third := start.Add(2 * time.Minute) // run 3 fired at exactly this instant

	h.set(third.Add(2 * day))
	rep := h.prune(t, 2, 100)
	require.Equal(t, int64(2), rep.Firings)
	require.Equal(t, []int{4, 3}, h.keptRuns(t, s.ID), "fired at the cut-off: kept")

	h.set(third.Add(2*day + time.Microsecond))
	require.Equal(t, int64(1), h.prune(t, 2, 100).Firings)
	require.Equal(t, []int{4}, h.keptRuns(t, s.ID), "a microsecond older: pruned")

	h.set(start.Add(30 * day))
	h.prune(t, 2, 100)
	require.Empty(t, h.keptRuns(t, s.ID), "every execution older than the days")
	require.Len(t, h.firingVersions(t, s.ID), 1, "the newest firing row is the guard of its due time")
	after, err := h.db.GetScheduleStats(h.ctx, s.ID)
	require.NoError(t, err)
	require.Nil(t, after.P95DurationSeconds, "no kept execution")
	before.P95DurationSeconds = nil
	require.Equal(t, before, after)
	require.Equal(t, 4, after.Completed)
}

// Counters follow every way an execution ends and un-ends: the batched
// completion, a failure decided later, a manual retry of an exhausted
// chain (no longer failed) and its retry completing.
func TestScheduleCountersFollowRetryChains(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	h := newHistoryEnv(t, start.Add(-time.Hour))
	s := h.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.MaxFailures = 0 })
	first := h.fireAt(t, start)
	h.end(t, first, "failed")
	st := h.requireCountersMatchScan(t, s.ID)
	require.Equal(t, 1, st.Failed)

	retry, err := h.db.CreateRetry(h.ctx, h.db.pool, first, RetryParams{Manual: true, Meta: h.admin})
	require.NoError(t, err)
	st = h.requireCountersMatchScan(t, s.ID)
	require.Equal(t, 0, st.Failed, "retried by hand: the execution is open again")
	require.Equal(t, 1, st.Unfinished)
	require.Equal(t, 1, st.LastFailure.Run, "the last failure recorded stays")

	h.set(retry.AvailableAt.Add(time.Second))
	h.end(t, retry.ID, "completed")
	st = h.requireCountersMatchScan(t, s.ID)
	require.Equal(t, 1, st.Completed)
	require.Equal(t, 0, st.Unfinished)
	require.NotNil(t, st.AvgDurationSeconds)
}

// The migration's backfill gives the counters the write path keeps.
func TestScheduleCountersBackfill(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	h := newHistoryEnv(t, start.Add(-time.Hour))
	s := h.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.MaxFailures = 0 })
	for i, o := range []string{"completed", "failed", "cancelled", "completed", "pending"} {
		h.end(t, h.fireAt(t, start.Add(time.Duration(i)*time.Minute)), o)
	}
	kept, err := h.db.GetScheduleStats(h.ctx, s.ID)
	require.NoError(t, err)

	_, err = h.db.pool.Exec(h.ctx, `DELETE FROM schedule_counts`)
	require.NoError(t, err)
	_, err = h.db.pool.Exec(h.ctx, backfillSQL(t))
	require.NoError(t, err)
	backfilled, err := h.db.GetScheduleStats(h.ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, kept, backfilled)
}

// backfillSQL is migration 037's backfill statement.
func backfillSQL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../migrations/037_schedule_history.up.sql")
	require.NoError(t, err)
	i := strings.Index(string(b), "INSERT INTO schedule_counts")
	require.Positive(t, i)
	return string(b[i:])
}

// The stats sum a schedule's rows of every server process, and the last
// failure is the one with the highest run, whichever row holds it.
func TestScheduleStatsSumTheProcessRows(t *testing.T) {
	t.Parallel()
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	h := newHistoryEnv(t, start.Add(-time.Hour))
	s := h.create(t, func(sp *events.ScheduleSpec) { sp.StartAt = &start; sp.MaxFailures = 0 })
	h.end(t, h.fireAt(t, start), "failed")
	for _, row := range []struct{ pid, completed, lastRun int }{{pid: 1, completed: 2, lastRun: 7}, {pid: 2, completed: 3, lastRun: 5}} {
		_, err := h.db.pool.Exec(h.ctx, `INSERT INTO schedule_counts (schedule_id, pid, completed, last_failure_run,
			last_failure_task_id, last_failure_reason, last_failure_at) VALUES ($1, $2, $3, $4, gen_random_uuid(), 'row', now())`,
			s.ID, row.pid, row.completed, row.lastRun)
		require.NoError(t, err)
	}
	st, err := h.db.GetScheduleStats(h.ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, 5, st.Completed)
	require.Equal(t, 1, st.Failed)
	require.Equal(t, 7, st.LastFailure.Run)

	h.prune(t, 30, 100)
	var rows int
	require.NoError(t, h.db.pool.QueryRow(h.ctx, `SELECT count(*) FROM schedule_counts WHERE schedule_id = $1`, s.ID).Scan(&rows))
	require.Equal(t, 1, rows)
	folded, err := h.db.GetScheduleStats(h.ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, st, folded, "folding the rows changes no stat")
}
