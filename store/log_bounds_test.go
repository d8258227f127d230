package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// The log's reads name the times they need (log marks, the newest-first
// windows, a task's life; ADR 034) and still return exactly what the same
// reads with no time return: over ten days of events, some stamped by an
// instance whose clock is 50 minutes behind, from every position.
func TestLogReadsBoundedByTimeMissNothing(t *testing.T) {
	ctx := context.Background()
	start := time.Now().UTC().Add(-10 * 24 * time.Hour).Truncate(time.Hour)
	var now atomic.Int64
	now.Store(start.UnixNano())
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	require.NoError(t, err)
	admin := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "job", Label: "Job", ParamSchema: []byte(`{"type":"object"}`)}, admin)
	require.NoError(t, err)

	var tasks []string
	// An admin registered on the sixth day, who creates a task every 6 hours after.
	var userID string
	for step := range 40 { // every 6 hours for 10 days
		now.Store(start.Add(time.Duration(step) * 6 * time.Hour).UnixNano())
		require.NoError(t, db.LoadLogMarks(ctx))
		if step == 20 {
			u, err := db.CreateUser(ctx, events.UserRegistered{Email: "late@test.invalid", FullName: "Late", IsAdmin: true},
				"password", "not-a-real-hash", admin)
			require.NoError(t, err)
			userID = u.ID
		}
		for i := range 5 {
			meta := admin
			if userID != "" && i == 0 {
				meta = events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: userID}}
			}
			tk, err := db.CreateTask(ctx, db.pool, NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
				Title: fmt.Sprintf("t%d-%d", step, i), Priority: events.PriorityMedium, Params: []byte(`{}`)}}, meta)
			require.NoError(t, err)
			tasks = append(tasks, tk.ID)
		}
		// A later change to an older task, stamped by a clock 50 minutes
		// behind this one.
		_, err := db.pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
			SELECT 'task', id, version + 1, 'task.update_posted', '{"message":"m"}', '{}', $2 FROM worker_tasks WHERE id = $1`,
			tasks[len(tasks)/2], db.Now().Add(-50*time.Minute))
		require.NoError(t, err)
		_, err = db.pool.Exec(ctx, `UPDATE worker_tasks SET version = version + 1 WHERE id = $1`, tasks[len(tasks)/2])
		require.NoError(t, err)
	}
	now.Store(start.Add(10 * 24 * time.Hour).UnixNano())
	require.NoError(t, db.LoadLogMarks(ctx))
	var marks int
	require.NoError(t, db.pool.QueryRow(ctx, `SELECT count(*) FROM log_marks`).Scan(&marks))
	require.Greater(t, marks, 30, "a mark every 15 minutes of the store's clock, at most")

	unbounded := func(after events.Position, limit int, f LogFilter) []events.Envelope {
		sql, args := readLogSQL(after, limit, f, timeBounds{})
		rows, err := db.pool.Query(ctx, sql, args...)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, scanEvent)
		require.NoError(t, err)
		return out
	}
	check := func(layout string) {
		t.Helper()
		// Consumers see an event once every transaction older than it ended,
		// cluster-wide (other tests' too): wait for all of them.
		var total int
		require.NoError(t, db.pool.QueryRow(ctx, `SELECT count(*) FROM task_events`).Scan(&total))
		require.Greater(t, total, 200)
		var all []events.Envelope
		require.Eventually(t, func() bool {
			all = unbounded(events.Position{}, 100_000, LogFilter{})
			return len(all) == total
		}, time.Minute, 50*time.Millisecond)
		bounded := 0
		for i := 0; i < len(all); i += 7 {
			pos := all[i].Position()
			if f, ok := db.logFloor(pos); ok && f.After(start) {
				bounded++
			}
			for _, f := range []LogFilter{{}, {Types: []string{"task.update_posted"}}, {Types: []string{"task.created", "task.update_posted"}},
				{WorkerID: userID}, {WorkerID: uuid.NewString()}} {
				for _, limit := range []int{1, 10, 500} {
					got, err := db.ReadLog(ctx, db.pool, pos, limit, f)
					require.NoError(t, err)
					require.Equal(t, positions(unbounded(pos, limit, f)), positions(got), "%s: after %s, limit %d, %v", layout, pos, limit, f)
				}
			}
		}
		require.Greater(t, bounded, len(all)/7/2, "most reads name a time")

		head, err := db.LogHead(ctx, db.pool)
		require.NoError(t, err)
		require.Equal(t, all[len(all)-1].Position(), head)
		end, err := db.ReadLogEnd(ctx, db.pool)
		require.NoError(t, err)
		require.Equal(t, head, end.Head)
		for _, f := range []LogFilter{{}, {Types: []string{"task.update_posted"}}, {WorkerID: userID}, {WorkerID: uuid.NewString()}} {
			for _, limit := range []int{1, 50, 1000} {
				got, err := db.RecentEvents(ctx, limit, f)
				require.NoError(t, err)
				want := unbounded(events.Position{}, 100_000, f)
				if len(want) > limit {
					want = want[len(want)-limit:]
				}
				for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
					want[i], want[j] = want[j], want[i]
				}
				require.Equal(t, positions(want), positions(got), "%s: recent %d, %v", layout, limit, f)
			}
		}
		for _, id := range []string{tasks[0], tasks[len(tasks)/2], tasks[len(tasks)-1], uuid.NewString()} {
			got, err := db.TaskStream(ctx, db.pool, id)
			require.NoError(t, err)
			want, err := db.Stream(ctx, db.pool, id)
			require.NoError(t, err)
			require.Equal(t, positions(want), positions(got), "%s: %s", layout, id)
		}
	}
	check("every event in the default partition")

	// The same log partitioned as migration 054 leaves a log it converts:
	// its first six days one partition (a read's window ends inside it),
	// the days after it one partition each.
	conn, err := db.pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = createPartition(ctx, conn.Conn(), "task_events_old", start.Truncate(24*time.Hour), start.Truncate(24*time.Hour).AddDate(0, 0, 6), nil, true)
	conn.Release()
	require.NoError(t, err)
	_, err = db.MaintainPartitions(ctx, PartitionPolicy{Kind: "day", Ahead: 1})
	require.NoError(t, err)
	require.NoError(t, db.LoadLogMarks(ctx))
	parts, err := EventPartitions(ctx, db.pool)
	require.NoError(t, err)
	require.Greater(t, len(parts), 5, "the old log and the days after it")
	check("the old log one partition, days after")
	require.NoError(t, db.EnsureCheckpoint(ctx, "probe", []string{"task.update_posted"}))
	w, err := db.Pending(ctx, "probe", []string{"task.update_posted"})
	require.NoError(t, err)
	require.True(t, w.Visible)
}

func positions(evs []events.Envelope) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Position().String()
	}
	return out
}

// A reactor's probe names an upper time, ClockSkew past the store's clock
// (so the partitions made ahead are not probed): an event stamped further
// ahead is seen once the clock gets within ClockSkew of it, never skipped.
func TestPendingSeesAnEventStampedAheadOnceTheClockNears(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{},
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	require.NoError(t, err)
	require.NoError(t, db.EnsureCheckpoint(ctx, "ahead", []string{"task.update_posted"}))
	stamp := db.Now().Add(ClockSkew + time.Hour)
	_, err = db.pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
		VALUES ('task', gen_random_uuid(), 1, 'task.update_posted', '{"message":"m"}', '{}', $1)`, stamp)
	require.NoError(t, err)
	// Seen is Visible, or Hidden while another transaction of the cluster
	// holds the horizon back (other tests share it).
	seen := func() (Work, bool) {
		w, err := db.Pending(ctx, "ahead", []string{"task.update_posted"})
		require.NoError(t, err)
		return w, w.Visible || w.Hidden
	}
	_, ok := seen()
	require.False(t, ok, "stamped more than ClockSkew ahead: not probed yet")
	now.Store(stamp.Add(-ClockSkew + time.Minute).UnixNano())
	_, ok = seen()
	require.True(t, ok, "within ClockSkew of the clock: seen")
	require.Eventually(t, func() bool {
		w, _ := seen()
		evs, err := db.ReadLog(ctx, db.pool, w.Checkpoint.Position, 10, LogFilter{Types: []string{"task.update_posted"}})
		require.NoError(t, err)
		return len(evs) == 1
	}, time.Minute, 20*time.Millisecond, "and the reactor's read finds it")
}

// A read's first window reaches to the end of the partition it ends in: a
// window ending inside a partition wider than a day (the log before
// migration 054, one partition) prunes nothing and would make the read
// filter every entry of that partition by time. Over daily partitions the
// window stays a day and a bit.
func TestReadWindowEndsWithItsPartition(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	db := &DB{now: func() time.Time { return now }}
	day := func(d int) time.Time { return now.Truncate(24*time.Hour).AddDate(0, 0, d) }
	db.marks.loadedAt = now.Add(-time.Second)
	for d := -60; d <= 0; d++ {
		db.marks.marks = append(db.marks.marks, logMark{pos: events.Position{TxID: 822, Seq: int64(100 * (d + 61))}, at: day(d)})
	}
	var windows []timeBounds
	read := func(after events.Position, limit int, b timeBounds) ([]events.Envelope, error) {
		windows = append(windows, b)
		return nil, nil
	}

	// The log migration 054 made one partition, and the days after it.
	db.marks.parts = []EventPartition{{Name: "old", From: day(-61), To: day(1)}, {Name: "d1", From: day(1), To: day(2)}, {Name: "default", Default: true}}
	for _, pos := range []events.Position{{}, {TxID: 822, Seq: 150}, {TxID: 822, Seq: 3000}} {
		windows = nil
		_, err := db.readLogBounded(context.Background(), pos, 100, time.Time{}, read)
		require.NoError(t, err)
		require.Len(t, windows, 1, "from %v: one read, with no end", pos)
		require.True(t, windows[0].until.IsZero(), "from %v", pos)
	}

	// Daily partitions: the window stays the day after the floor.
	db.marks.parts = nil
	for d := -61; d <= 1; d++ {
		db.marks.parts = append(db.marks.parts, EventPartition{Name: fmt.Sprint(d), From: day(d), To: day(d + 1)})
	}
	windows = nil
	_, err := db.readLogBounded(context.Background(), events.Position{TxID: 822, Seq: 150}, 100, time.Time{}, read)
	require.NoError(t, err)
	require.Equal(t, timeBounds{from: day(-60), until: day(-59)}, windows[0])
	// A page left short reads on to a week past the floor, then to the
	// log's end, every read from the floor: 3 reads for 61 days, the last
	// one of 59 days, as before.
	require.Equal(t, []timeBounds{
		{from: day(-60), until: day(-59)},
		{from: day(-60), until: day(-53)},
		{from: day(-60)},
	}, windows)

	// A partition of ten days where the floor is: the week's window would
	// end where the day's did, and is not read again.
	db.marks.parts = append([]EventPartition{{Name: "ten", From: day(-61), To: day(-50)}}, db.marks.parts[11:]...)
	windows = nil
	_, err = db.readLogBounded(context.Background(), events.Position{TxID: 822, Seq: 150}, 100, time.Time{}, read)
	require.NoError(t, err)
	require.Equal(t, []timeBounds{{from: day(-60), until: day(-50)}, {from: day(-60)}}, windows)

	// A user registered ten days ago, read from the log's start: the
	// windows start at its registration less ClockSkew.
	windows = nil
	_, err = db.readLogBounded(context.Background(), events.Position{}, 100, day(-10).Add(-ClockSkew), read)
	require.NoError(t, err)
	require.Equal(t, []timeBounds{
		{from: day(-10).Add(-ClockSkew), until: day(-9)},
		{from: day(-10).Add(-ClockSkew), until: day(-3)},
		{from: day(-10).Add(-ClockSkew)},
	}, windows)
}
