package store

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// Every order of the task list, over 100,000 tasks of every status, pages
// by keyset in an index's order (never sorting the history), and its pages
// walk the list in exactly the order ORDER BY gives; a cursor of one order
// is refused by another, and the started and longest orders refuse the
// filters no index serves.
func TestTaskListSorts(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100k rows; skipped with -short")
	}
	e := newBatchEnv(t)
	worker := e.user(t, "w", true, 100)
	// g % 10: 0-5 completed, 6-7 failed, 8 cancelled (half of them after a
	// start), 9 pending; every 1000th in progress. Run times repeat, so
	// the keyset's tie on id matters.
	_, err := e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status, assigned_to,
		created_at, started_at, completed_at, updated_at, available_at, version)
		SELECT gen_random_uuid(), 'task ' || g, $1, 'medium', s, CASE WHEN s <> 'pending' THEN $2::uuid END,
		       c, CASE WHEN s IN ('completed', 'failed', 'in_progress') OR (s = 'cancelled' AND g % 20 = 8) THEN c + interval '1 s' END,
		       CASE WHEN s IN ('completed', 'failed', 'cancelled') THEN c + interval '1 s' + (g % 97 || ' s')::interval END,
		       now(), now(), 3
		  FROM generate_series(1, 100000) g,
		       LATERAL (SELECT now() - (g * 7 || ' s')::interval AS c,
		               CASE WHEN g % 1000 = 0 THEN 'in_progress' WHEN g % 10 < 6 THEN 'completed' WHEN g % 10 < 8 THEN 'failed'
		                    WHEN g % 10 = 8 THEN 'cancelled' ELSE 'pending' END AS s) x`, e.typeID, worker)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `VACUUM ANALYZE worker_tasks`)
	require.NoError(t, err)

	// plan is EXPLAIN ANALYZE of f's page, and the most rows any scan read.
	rowsRead := regexp.MustCompile(`(?:Scan|Filter).*actual time=\S+ rows=(\d+)|Rows Removed by Filter: (\d+)`)
	plan := func(f TaskFilter) (string, int) {
		t.Helper()
		sql, args, err := e.db.listTasksSQL(f)
		require.NoError(t, err)
		rows, err := e.db.pool.Query(e.ctx, `EXPLAIN (ANALYZE, COSTS OFF) `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		most := 0
		for _, l := range lines {
			if m := rowsRead.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1] + m[2])
				most = max(most, n)
			}
		}
		return strings.Join(lines, "\n"), most
	}
	page1, err := e.db.ListTasks(e.ctx, TaskFilter{Limit: 50})
	require.NoError(t, err)
	for _, f := range []TaskFilter{
		{Sort: SortOldest}, {Sort: SortOldest, Status: events.StatusFailed},
		{Sort: SortStarted}, {Sort: SortStarted, Status: events.StatusFailed}, {Sort: SortStarted, Status: events.StatusInProgress},
		{Sort: SortLongest}, {Sort: SortLongest, Status: events.StatusCancelled},
	} {
		f.Limit = 50
		for _, after := range []string{"", "deep"} {
			if after != "" {
				// The same from a cursor deep in the list.
				deep, err := e.db.ListTasks(e.ctx, TaskFilter{Sort: f.Sort, Status: f.Status, Limit: 200})
				require.NoError(t, err)
				f.After = f.Sort.Cursor(&deep.Tasks[len(deep.Tasks)-1])
			}
			p, most := plan(f)
			require.NotContains(t, p, "Seq Scan", "%+v\n%s", f, p)
			// A page of 50 reads its 51 rows from each index it merges, at
			// most the 100 tasks in progress (worker_tasks_held, read
			// whole), and, in created order with a status filter, the rows
			// of other statuses between them (as the default order does).
			require.LessOrEqual(t, most, 300, "%+v\n%s", f, p)
			switch f.Sort {
			case SortStarted:
				if f.Status != events.StatusInProgress {
					require.Contains(t, p, "worker_tasks_started", "%+v\n%s", f, p)
				}
			case SortLongest:
				require.Contains(t, p, "worker_tasks_run_time", "%+v\n%s", f, p)
			}
		}
	}

	// Pages of 7 walk the first 40 of each order exactly as ORDER BY has them.
	walk := func(f TaskFilter) []string {
		var ids []string
		for len(ids) < 40 {
			f.Limit = 7
			page, err := e.db.ListTasks(e.ctx, f)
			require.NoError(t, err)
			for _, tk := range page.Tasks {
				ids = append(ids, tk.ID)
			}
			require.NotEmpty(t, page.NextCursor)
			f.After = page.NextCursor
		}
		return ids[:40]
	}
	want := func(where, order string) []string {
		rows, err := e.db.pool.Query(e.ctx, `SELECT id::text FROM worker_tasks WHERE `+where+` ORDER BY `+order+` LIMIT 40`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	require.Equal(t, want("true", "created_at, id"), walk(TaskFilter{Sort: SortOldest}))
	require.Equal(t, want("started_at IS NOT NULL AND status <> 'pending'", "started_at DESC, id DESC"), walk(TaskFilter{Sort: SortStarted}))
	require.Equal(t, want("status IN ('completed', 'failed', 'cancelled') AND started_at IS NOT NULL", "completed_at - started_at DESC, id DESC"),
		walk(TaskFilter{Sort: SortLongest}))
	require.Equal(t, want("status = 'failed'", "completed_at - started_at DESC, id DESC"),
		walk(TaskFilter{Sort: SortLongest, Status: events.StatusFailed}))

	// A cursor belongs to its order.
	longest, err := e.db.ListTasks(e.ctx, TaskFilter{Sort: SortLongest, Limit: 5})
	require.NoError(t, err)
	for _, f := range []TaskFilter{
		{Sort: SortNewest, After: longest.NextCursor},
		{Sort: SortStarted, After: longest.NextCursor},
		{Sort: SortLongest, After: page1.NextCursor},
	} {
		_, err := e.db.ListTasks(e.ctx, f)
		require.ErrorIs(t, err, events.ErrInvalid, "%+v", f)
		require.ErrorContains(t, err, "after")
	}
	for f, msg := range map[*TaskFilter]string{
		{Sort: "bogus"}: "sort",
		{Sort: SortStarted, TaskTypeID: e.typeID}:            "status filter only",
		{Sort: SortLongest, Search: "task"}:                  "status filter only",
		{Sort: SortLongest, Status: events.StatusInProgress}: "not in_progress ones",
		{Sort: SortStarted, Status: events.StatusPending}:    "not pending ones",
	} {
		_, err := e.db.ListTasks(e.ctx, *f)
		require.ErrorIs(t, err, events.ErrInvalid, "%+v", *f)
		require.ErrorContains(t, err, msg, fmt.Sprintf("%+v", *f))
	}
}
