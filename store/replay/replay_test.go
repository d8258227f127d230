package replay_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

func verify(t *testing.T, pool *pgxpool.Pool) *replay.Report {
	t.Helper()
	rep, err := replay.Verify(context.Background(), pool, replay.VerifyConfig{})
	require.NoError(t, err)
	return rep
}

func requireClean(t *testing.T, rep *replay.Report) {
	t.Helper()
	require.True(t, rep.Clean(), "differences: %+v", rep.Differences)
	require.Empty(t, rep.Differences)
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// A random workload through the store leaves projections that equal the
// fold of the events; tampering with them by hand is reported row by row;
// a rebuild repairs it and keeps what is not events (heartbeats), the
// indexes and constraint names, and the store works on the swapped tables.
func TestVerifyRebuildAfterRandomWorkload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 12)
	w.runConcurrently(ctx, t, 6, 1200, 1)
	t.Logf("workload: %d commands done, %d refused; %d tasks", w.done.Load(), w.refused.Load(), len(w.tasks))
	require.Greater(t, len(w.tasks), 1000, "thousands of tasks")
	w.decideRetries(ctx, t)
	for _, kind := range []string{"task.released", "task.failed", "task.retried", "task.retry_skipped",
		"task.retries_exhausted", "task.cancelled", "task.assigned", "task.edited", "task.update_posted",
		"task.result_posted", "task.completed", "worker.went_offline", "worker.went_online", "task_type.updated"} {
		require.Positive(t, count(t, pool, `SELECT count(*) FROM task_events WHERE type = $1`, kind), kind)
	}

	rep := verify(t, pool)
	requireClean(t, rep)
	require.Equal(t, count(t, pool, `SELECT count(*) FROM task_events`), rep.Events)
	for _, table := range []string{"users", "task_types", "worker_tasks", "task_titles", "worker_task_updates", "task_assignments"} {
		require.Equal(t, count(t, pool, `SELECT count(*) FROM `+table), rep.Tables[table].Rows, table)
	}
	require.Positive(t, count(t, pool, `SELECT count(*) FROM task_titles l JOIN worker_tasks t USING (id)
		WHERE l.title = t.title AND l.title LIKE 'edited %'`), "edited titles are projected")

	// Tamper: one changed column, one missing row, one bogus row, one
	// changed user, one changed title; the heartbeat columns are not events
	// and not compared.
	var taskID, titleID, updateID, workerID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM worker_tasks ORDER BY id LIMIT 1 OFFSET 17`).Scan(&taskID))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM task_titles ORDER BY id LIMIT 1 OFFSET 23`).Scan(&titleID))
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM worker_task_updates ORDER BY id LIMIT 1 OFFSET 5`).Scan(&updateID))
	workerID = w.workers[3]
	for _, sql := range []string{
		`UPDATE worker_tasks SET title = 'x' WHERE id = '` + taskID + `'`,
		`DELETE FROM worker_task_updates WHERE id = '` + updateID + `'`,
		`INSERT INTO task_assignments (task_id, version, worker_id, kind, at) VALUES ('` + taskID + `', 999, '` + workerID + `', 'claimed', now())`,
		`UPDATE users SET full_name = 'Mallory', last_activity_at = '2001-02-03T04:05:06Z' WHERE id = '` + workerID + `'`,
		`UPDATE task_titles SET title = 'y' WHERE id = '` + titleID + `'`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	rep = verify(t, pool)
	require.False(t, rep.Clean())
	got := map[string]replay.Difference{}
	for _, d := range rep.Differences {
		got[d.Table+" "+d.Key] = d
	}
	require.Len(t, got, 5, "differences: %+v", rep.Differences)
	d := got["worker_tasks id="+taskID]
	require.Equal(t, replay.Changed, d.Side)
	require.Equal(t, []string{"title"}, d.Changed)
	require.Equal(t, "x", *d.Live[1])
	require.NotEqual(t, "x", *d.Events[1])
	require.Equal(t, replay.EventsOnly, got["worker_task_updates id="+updateID].Side)
	require.Equal(t, replay.LiveOnly, got["task_assignments task_id="+taskID+" version=999"].Side)
	d = got["users id="+workerID]
	require.Equal(t, replay.Changed, d.Side)
	require.Equal(t, []string{"full_name"}, d.Changed)
	d = got["task_titles id="+titleID]
	require.Equal(t, replay.Changed, d.Side)
	require.Equal(t, []string{"title"}, d.Changed)
	require.Equal(t, "y", *d.Live[1])
	require.Equal(t, replay.TableDiff{Rows: rep.Tables["worker_tasks"].Rows, LiveRows: 1, FoldRows: 1}, rep.Tables["worker_tasks"])

	indexesBefore := indexNames(t, pool)
	rb, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.Equal(t, rep.Events, rb.Events)
	requireClean(t, verify(t, pool))
	require.Equal(t, indexesBefore, indexNames(t, pool), "indexes and constraints keep their names")
	var seen time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_activity_at FROM users WHERE id = $1`, workerID).Scan(&seen))
	require.True(t, seen.Equal(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)), "heartbeat carried over: %s", seen)

	// The write path works on the swapped tables, its prepared statements
	// included, and constraint errors still map by name.
	w.runConcurrently(ctx, t, 2, 200, 99)
	_, err = w.db.CreateUser(ctx, events.UserRegistered{Email: "ada@example.com", FullName: "Ada Again", IsAdmin: true},
		"admin-password", "x", w.admin)
	var dup *events.DuplicateError
	require.ErrorAs(t, err, &dup)
	requireClean(t, verify(t, pool))
}

func indexNames(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT tablename || '.' || indexname FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename IN ('users', 'task_types', 'worker_tasks', 'task_titles', 'worker_task_updates', 'task_assignments')`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	sort.Strings(out)
	require.Contains(t, out, "worker_tasks.worker_tasks_one_retry")
	require.Contains(t, out, "task_titles.task_titles_title_trgm")
	// Migration 055's, which the UI's worker pickers read.
	require.Contains(t, out, "users.users_workers_by_name_prefix")
	require.Contains(t, out, "users.users_workers_by_email_prefix")
	// Migration 056's, which the stuck list reads.
	require.Contains(t, out, "worker_tasks.worker_tasks_waiting_for")
	return out
}

// A rebuild while writers keep appending loses nothing: the events they
// append during the bulk fold are caught up before the swap, so the swapped
// tables verify clean once the writers stop.
func TestRebuildWhileWritersAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 8)
	w.runConcurrently(ctx, t, 4, 300, 3)

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() { errs <- w.run(wctx, uint64(100+i), 1_000_000) })
	}
	var reports []*replay.RebuildReport
	for range 3 {
		before := count(t, pool, `SELECT count(*) FROM task_events`)
		rb, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
		require.NoError(t, err)
		reports = append(reports, rb)
		require.Greater(t, count(t, pool, `SELECT count(*) FROM task_events`), before, "writers kept appending")
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var caughtUp int64
	for _, rb := range reports {
		caughtUp += rb.CaughtUp
		t.Logf("rebuild: %d events, %d caught up, lock held %s after %d attempts", rb.Events, rb.CaughtUp, rb.LockHeld, rb.LockAttempts)
	}
	require.Positive(t, caughtUp, "some events arrived during a rebuild")
	rep := verify(t, pool)
	requireClean(t, rep)
	require.Equal(t, count(t, pool, `SELECT count(*) FROM task_events`), rep.Events)
}

// Only one rebuild runs at a time.
func TestRebuildIsExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(0x7265706c6179))
	require.NoError(t, err)
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.ErrorIs(t, err, replay.ErrBusy)
}

// A log with a missing version is refused, not folded into a silently
// wrong rebuild.
func TestVerifyRefusesABrokenLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 1)
	// The worker's stream is registered, went_online: drop the first.
	_, err := pool.Exec(ctx, `DELETE FROM task_events WHERE stream_id = $1 AND version = 1`, w.workers[0])
	require.NoError(t, err)
	_, err = replay.Verify(ctx, pool, replay.VerifyConfig{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "has version 2")
	require.Contains(t, err.Error(), "the log has a gap")
}

// A swap cannot carry a trigger over to the fresh tables, so a rebuild
// refuses a live table with one, naming it, before any work.
func TestRebuildRefusesATrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	_, err := pool.Exec(ctx, `CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
		CREATE TRIGGER audit AFTER UPDATE ON task_counts FOR EACH STATEMENT EXECUTE FUNCTION noop()`)
	require.NoError(t, err)
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.ErrorContains(t, err, "task_counts has trigger audit")
	var triggers int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'audit'
		AND tgrelid = 'task_counts'::regclass`).Scan(&triggers))
	require.Equal(t, 1, triggers, "nothing swapped")
}
