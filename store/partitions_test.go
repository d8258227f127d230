package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/storetest"
)

// partitionEnv is a store whose clock the test moves.
type partitionEnv struct {
	ctx    context.Context
	db     *DB
	now    atomic.Int64 // unix microseconds
	typeID string
	admin  events.Meta
}

func newPartitionEnv(t *testing.T, start time.Time) *partitionEnv {
	t.Helper()
	e := &partitionEnv{ctx: context.Background(), admin: events.Meta{Actor: events.System("test")}}
	e.now.Store(start.UnixMicro())
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.UnixMicro(e.now.Load()) }})
	require.NoError(t, err)
	e.db = db
	tt, err := db.CreateTaskType(e.ctx, events.TaskTypeSpec{Name: "job", Label: "Job", ParamSchema: []byte(`{"type":"object"}`)}, e.admin)
	require.NoError(t, err)
	e.typeID = tt.ID
	return e
}

func (e *partitionEnv) create(title string) (*events.Task, error) {
	return e.db.CreateTask(e.ctx, e.db.pool, NewTaskParams{TaskTypeID: e.typeID, NewTaskParams: events.NewTaskParams{
		Title: title, Priority: events.PriorityMedium, Params: json.RawMessage(`{}`)}}, e.admin)
}

func (e *partitionEnv) retitle(id, title string) error {
	_, _, err := e.db.UpdateTask(e.ctx, e.db.pool, id, e.admin, func(t *events.Task) ([]events.Payload, error) {
		return t.Edit(events.TaskEdit{Title: &title})
	})
	return err
}

// writeUntil starts n writers on wg, each calling write(w, i) for i = 0, 1,
// ... until stop closes or write fails; a failure goes to the channel, which
// holds one of each writer's.
func writeUntil(n int, stop <-chan struct{}, wg *sync.WaitGroup, write func(w, i int) error) chan error {
	errs := make(chan error, n)
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := write(w, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	return errs
}

// The clock crosses six day boundaries while writers create and edit tasks
// and the maintenance runs beside them: no event is lost, each lies in the
// partition whose range holds its occurred_at (none is left in the
// default), the partitions ahead keep being created, and a task whose
// events span partitions keeps consecutive versions.
func TestPartitionsAcrossBoundaries(t *testing.T) {
	// Far from today's partition (migration 044's), at 21:00 UTC.
	day0 := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 2, 0)
	e := newPartitionEnv(t, day0.Add(21*time.Hour))
	pol := PartitionPolicy{Kind: archive.Day, Ahead: 1}
	rep, err := e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	require.Equal(t, []string{partitionName(archive.Day, day0, day0.AddDate(0, 0, 1)),
		partitionName(archive.Day, day0.AddDate(0, 0, 1), day0.AddDate(0, 0, 2))}, rep.Created)

	type written struct {
		id       string
		versions int
	}
	var (
		mu    sync.Mutex
		tasks []written
		ops   atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	writerE := writeUntil(4, stop, &wg, func(w, i int) error {
		tk, err := e.create(fmt.Sprintf("w%d-%d", w, i))
		if err != nil {
			return err
		}
		n := 1
		// Two edits, likely in a later hour than the create: a stream's
		// versions across partitions.
		for j := range 2 {
			if err := e.retitle(tk.ID, fmt.Sprintf("w%d-%d-%d", w, i, j)); err != nil {
				return err
			}
			n++
			ops.Add(1)
		}
		mu.Lock()
		tasks = append(tasks, written{tk.ID, n})
		mu.Unlock()
		ops.Add(1)
		return nil
	})
	// Six hours a step, 24 steps: six midnights. Each step waits for the
	// writers to write in the new hour, and runs a maintenance pass.
	var maintained []string
	for range 24 {
		e.now.Add((6 * time.Hour).Microseconds())
		before := ops.Load()
		require.Eventually(t, func() bool {
			select {
			case err := <-writerE:
				require.NoError(t, err)
			default:
			}
			return ops.Load() >= before+20
		}, time.Minute, time.Millisecond)
		rep, err := e.db.MaintainPartitions(e.ctx, pol)
		require.NoError(t, err)
		maintained = append(maintained, rep.Created...)
	}
	close(stop)
	wg.Wait()
	close(writerE)
	for err := range writerE {
		require.NoError(t, err)
	}
	rep, err = e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	maintained = append(maintained, rep.Created...)

	// Partitions ahead: the clock's day and the next one exist, and every
	// day the clock crossed has its own partition.
	now := time.UnixMicro(e.now.Load()).UTC()
	parts, err := EventPartitions(e.ctx, e.db.pool)
	require.NoError(t, err)
	byName := map[string]EventPartition{}
	for _, p := range parts {
		byName[p.Name] = p
	}
	for d := day0; !d.After(PeriodStart(archive.Day, now).AddDate(0, 0, 1)); d = d.AddDate(0, 0, 1) {
		name := partitionName(archive.Day, d, d.AddDate(0, 0, 1))
		require.Contains(t, byName, name, "partitions: %v", parts)
	}
	require.GreaterOrEqual(t, len(maintained), 6, "the passes created the days ahead as the clock moved: %v", maintained)

	// Nothing lost: every task's events, versions 1..n.
	ids := make([]string, len(tasks))
	want := map[string]int{}
	for i, w := range tasks {
		ids[i] = w.id
		want[w.id] = w.versions
	}
	require.Greater(t, len(tasks), 24*5)
	rows, err := e.db.pool.Query(e.ctx, `SELECT stream_id::text, array_agg(version ORDER BY version), tableoid::regclass::text, occurred_at
		  FROM task_events WHERE stream_id = ANY($1::uuid[]) GROUP BY stream_id, tableoid, occurred_at`, ids)
	require.NoError(t, err)
	type row struct {
		id       string
		versions []int32
		part     string
		at       time.Time
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.versions, &x.part, &x.at)
	})
	require.NoError(t, err)
	versions := map[string][]int32{}
	spanning := map[string]map[string]bool{}
	for _, r := range got {
		p, ok := byName[r.part]
		require.True(t, ok, "event of %s in %s", r.id, r.part)
		require.False(t, p.Default, "event of %s at %s left in the default partition", r.id, r.at)
		require.True(t, !r.at.Before(p.From) && r.at.Before(p.To), "event at %s in %s [%s, %s)", r.at, p.Name, p.From, p.To)
		versions[r.id] = append(versions[r.id], r.versions...)
		if spanning[r.id] == nil {
			spanning[r.id] = map[string]bool{}
		}
		spanning[r.id][r.part] = true
	}
	across := 0
	for id, n := range want {
		v := versions[id]
		slices.Sort(v)
		require.Len(t, v, n, id)
		for i := range v {
			require.EqualValues(t, i+1, v[i], id)
		}
		if len(spanning[id]) > 1 {
			across++
		}
	}
	require.Positive(t, across, "some task's events span partitions")
}

// A pass that creates the partition of a period already begun (the
// service was down past the partitions ahead, or none are kept ahead) runs
// while writers insert that period's events: each waits and lands in the
// new partition, or in the default one before it, never fails. Attached
// without the log's lock, an insert routed to the default partition before
// the attach committed failed its partition check (23514): the CI run of
// 28 Nov 2026 00:24 UTC lost three instances' start-ups to it.
func TestPartitionOfTheCurrentPeriodUnderWriters(t *testing.T) {
	day0 := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 4, 0)
	e := newPartitionEnv(t, day0.Add(12*time.Hour))
	pol := PartitionPolicy{Kind: archive.Day} // nothing ahead: each day's partition comes after its start
	var (
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		writes atomic.Int64
	)
	writerE := writeUntil(4, stop, &wg, func(w, i int) error {
		if _, err := e.create(fmt.Sprintf("w%d-%d", w, i)); err != nil {
			return err
		}
		writes.Add(1)
		return nil
	})
	for day := range 12 {
		before := writes.Load()
		require.Eventually(t, func() bool { return writes.Load() >= before+8 }, time.Minute, time.Millisecond)
		// The next day begins, and its pass starts at once, as a start-up does.
		e.now.Add((24 * time.Hour).Microseconds())
		rep, err := e.db.MaintainPartitions(e.ctx, pol)
		require.NoError(t, err)
		require.Contains(t, rep.Created, partitionName(archive.Day, day0.AddDate(0, 0, day+1), day0.AddDate(0, 0, day+2)))
		select {
		case err := <-writerE:
			require.NoError(t, err, "a writer, on day %d", day+1)
		default:
		}
	}
	close(stop)
	wg.Wait()
	close(writerE)
	for err := range writerE {
		require.NoError(t, err)
	}
	_, err := e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	var left, written int64
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM task_events_default),
		(SELECT count(*) FROM task_events WHERE type = 'task.created' AND occurred_at >= $1)`, day0).Scan(&left, &written))
	require.Zero(t, left, "the default partition is drained")
	require.Equal(t, writes.Load(), written, "every create's event is in the log")
}

// A lost race is an error across partitions too: two writers that both
// read version 1 append version 2, one before midnight and one after, so
// their events go to different partitions (no unique key spans them); the
// second fails with ErrConflict (event_streams, migration 044).
func TestPartitionsLostRaceAcrossBoundary(t *testing.T) {
	day0 := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 2, 0)
	e := newPartitionEnv(t, day0.Add(23*time.Hour+59*time.Minute))
	_, err := e.db.MaintainPartitions(e.ctx, PartitionPolicy{Kind: archive.Day, Ahead: 1})
	require.NoError(t, err)
	tk, err := e.create("raced")
	require.NoError(t, err)
	before, err := e.db.GetTask(e.ctx, e.db.pool, tk.ID)
	require.NoError(t, err)
	edit := func(title string) error {
		ps, err := before.Edit(events.TaskEdit{Title: &title})
		require.NoError(t, err)
		_, _, err = e.db.appendTask(e.ctx, e.db.pool, tk.ID, before, ps, e.admin)
		return err
	}
	require.NoError(t, edit("first"))
	e.now.Add((2 * time.Minute).Microseconds())
	require.ErrorIs(t, edit("second"), events.ErrConflict)
	var n int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1`, tk.ID).Scan(&n))
	require.Equal(t, 2, n)
	got, err := e.db.GetTask(e.ctx, e.db.pool, tk.ID)
	require.NoError(t, err)
	require.Equal(t, "first", got.Title)
}

// Events whose period has no partition land in the default one; a pass
// moves them into a partition of their period. Past retention, a
// partition is dropped only when it is empty and every period it covers is
// archived; sparse ones past retention are merged into one.
func TestPartitionsDefaultDropAndMerge(t *testing.T) {
	day0 := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 3, 0)
	// The type the day before: the days below hold tasks' events only.
	e := newPartitionEnv(t, day0.Add(-12*time.Hour))
	// Five days of tasks, no maintenance: all in the default partition.
	var ids [5][]string
	for d := range 5 {
		e.now.Store(day0.AddDate(0, 0, d).Add(12 * time.Hour).UnixMicro())
		for i := range 3 {
			tk, err := e.create(fmt.Sprintf("d%d-%d", d, i))
			require.NoError(t, err)
			ids[d] = append(ids[d], tk.ID)
		}
	}
	var inDefault int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events_default WHERE occurred_at >= $1`, day0).Scan(&inDefault))
	require.Equal(t, 15, inDefault)

	// Ten days later, a pass with 3 days' retention: the five days get
	// partitions of their own (their events moved); nothing is archived, so
	// nothing is dropped, and nothing merges without MergeBelow.
	e.now.Store(day0.AddDate(0, 0, 10).Add(time.Hour).UnixMicro())
	archived := map[time.Time]bool{}
	var amu sync.Mutex
	pol := PartitionPolicy{Kind: archive.Day, Ahead: 1, Retention: 3 * 24 * time.Hour,
		Archived: func(_ context.Context, kind string, start time.Time) (bool, error) {
			require.Equal(t, archive.Day, kind)
			amu.Lock()
			defer amu.Unlock()
			return archived[start], nil
		}}
	rep, err := e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	require.EqualValues(t, 16, rep.Moved, "15 tasks' events and their type's")
	require.Empty(t, rep.Dropped)
	for d := range 5 {
		require.Contains(t, rep.Created, partitionName(archive.Day, day0.AddDate(0, 0, d), day0.AddDate(0, 0, d+1)))
	}
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events_default`).Scan(&inDefault))
	require.Zero(t, inDefault)
	// The partitions that took moved events have statistics at once (the
	// planner would take them for empty until autovacuum came).
	var columns int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stats WHERE tablename = $1`,
		partitionName(archive.Day, day0, day0.AddDate(0, 0, 1))).Scan(&columns))
	require.Positive(t, columns, "analyzed")

	// Day 0 emptied (as compaction empties a period) but not archived:
	// kept. Day 1 archived but not empty: kept. Day 0 archived too: dropped.
	_, err = e.db.pool.Exec(e.ctx, `DELETE FROM task_events WHERE stream_id = ANY($1::uuid[])`, ids[0])
	require.NoError(t, err)
	archived[day0.AddDate(0, 0, 1)] = true
	rep, err = e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	require.Empty(t, rep.Dropped)
	archived[day0] = true
	rep, err = e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	require.Equal(t, []string{partitionName(archive.Day, day0, day0.AddDate(0, 0, 1))}, rep.Dropped)

	// Days 1-4 hold 3 events each: with MergeBelow 10, days 1-3 become one
	// partition (9 events), day 4 stays; every event is still there, in
	// order of its range.
	pol.MergeBelow = 10
	rep, err = e.db.MaintainPartitions(e.ctx, pol)
	require.NoError(t, err)
	merged := partitionName(archive.Day, day0.AddDate(0, 0, 1), day0.AddDate(0, 0, 4))
	require.Equal(t, []string{merged}, rep.Merged)
	var n int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+merged).Scan(&n))
	require.Equal(t, 9, n)
	var all []string
	for d := 1; d < 5; d++ {
		all = append(all, ids[d]...)
	}
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events WHERE stream_id = ANY($1::uuid[])`, all).Scan(&n))
	require.Equal(t, 12, n)
	// The merged partition's indexes carry its name, as every partition's.
	var idx []string
	rows, err := e.db.pool.Query(e.ctx, `SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY 1`, merged)
	require.NoError(t, err)
	idx, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, idx, merged+"_position")
	require.Contains(t, idx, merged+"_pkey")
	// Written again later (a live chain's next event), the merged range
	// is not where new events go: they carry the clock's time.
	tk, err := e.db.GetTask(e.ctx, e.db.pool, ids[2][0])
	require.NoError(t, err)
	title := "later"
	_, _, err = e.db.UpdateTask(e.ctx, e.db.pool, tk.ID, e.admin, func(t *events.Task) ([]events.Payload, error) {
		return t.Edit(events.TaskEdit{Title: &title})
	})
	require.NoError(t, err)
}
