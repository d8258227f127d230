package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// TestStuckReads: with a backlog of 100,000 pending tasks (half of them
// pre-assigned to live workers), the stuck count and the stuck list find
// the pending tasks pre-assigned to a silent worker through that worker,
// never by reading the backlog, and the list pages through them in order.
func TestStuckReads(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100k rows; skipped with -short")
	}
	e := newBatchEnv(t)
	var live []string
	for i := range 20 {
		live = append(live, e.user(t, fmt.Sprintf("live%d", i), true, 2))
	}
	silent := e.user(t, "silent", true, 2)
	silent2 := e.user(t, "silent2", true, 2)
	var stuck []string
	for i := range 3 {
		stuck = append(stuck, e.task(t, fmt.Sprintf("stuck %d", i), events.PriorityMedium, silent))
	}
	// A second silent worker's pre-assigned tasks interleave with the first's
	// in creation order (some high, for a filter beside the stuck one).
	for i := range 12 {
		p := events.PriorityMedium
		if i%3 == 0 {
			p = events.PriorityHigh
		}
		holder := silent2
		if i%4 == 0 {
			holder = silent
		}
		stuck = append(stuck, e.task(t, fmt.Sprintf("stuck2 %d", i), p, holder))
	}
	e.task(t, "live", events.PriorityMedium, live[0])
	_, err := e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status, assigned_to,
		created_at, updated_at, available_at, version)
		SELECT gen_random_uuid(), 'backlog ' || g, $1, 'medium', 'pending',
		       CASE WHEN g % 2 = 0 THEN ($2::uuid[])[1 + g % 20] END,
		       now() - (g || ' s')::interval, now(), now(), 1
		  FROM generate_series(1, 100000) g`, e.typeID, live)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE users SET online = true, last_activity_at = now() WHERE id = ANY($1)`, live)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE users SET online = false, last_activity_at = now() - interval '1 hour',
		offline_since = now() - interval '50 minutes' WHERE id = ANY($1)`, []string{silent, silent2})
	require.NoError(t, err)
	for _, sql := range []string{`VACUUM ANALYZE worker_tasks`, `ANALYZE users`} {
		_, err = e.db.pool.Exec(e.ctx, sql)
		require.NoError(t, err)
	}

	plan := func(sql string, args ...any) string {
		t.Helper()
		rows, err := e.db.pool.Query(e.ctx, `EXPLAIN `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		p := strings.Join(lines, "\n")
		if testing.Verbose() {
			t.Log(p)
		}
		return p
	}
	// Each silent worker's pending tasks by an index probe of its id.
	p := plan(stuckCount, time.Now().Add(-10*time.Minute))
	require.Contains(t, p, "(assigned_to = ANY", p)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
	require.NotContains(t, p, "worker_tasks_status", p)
	// The list: each silent worker's pending tasks in order, ids and keys
	// from worker_tasks_waiting_for alone, then the page's rows by key.
	sql, args, err := e.db.listTasksSQL(TaskFilter{Stuck: true, Limit: 50})
	require.NoError(t, err)
	p = plan(sql, args...)
	require.Contains(t, p, "Index Only Scan using worker_tasks_waiting_for", p)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
	require.NotContains(t, p, "worker_tasks_status", p)

	s, err := e.db.Stats(e.ctx)
	require.NoError(t, err)
	require.Equal(t, len(stuck), s.Stuck)
	page, err := e.db.ListTasks(e.ctx, TaskFilter{Stuck: true, Limit: 50})
	require.NoError(t, err)
	var got []string
	for _, tk := range page.Tasks {
		got = append(got, tk.ID)
	}
	require.ElementsMatch(t, stuck, got)

	// Paged in both created orders, alone and with a filter beside it, the
	// list is the stuck set's definition (stuckInProgress and stuckPending)
	// in the list's order.
	for _, f := range []TaskFilter{{Stuck: true}, {Stuck: true, Sort: SortOldest}, {Stuck: true, Priority: events.PriorityHigh},
		{Stuck: true, Sort: SortOldest, Priority: events.PriorityHigh}} {
		order := "t.created_at DESC, t.id DESC"
		if f.Sort == SortOldest {
			order = "t.created_at, t.id"
		}
		before := "now() - interval '5 minutes'"
		rows, err := e.db.pool.Query(e.ctx, `SELECT t.id FROM worker_tasks t WHERE t.priority = coalesce(nullif($1, ''), t.priority)
			AND t.id IN (`+stuckInProgress(before)+` UNION ALL `+stuckPending(before)+`) ORDER BY `+order, string(f.Priority))
		require.NoError(t, err)
		want, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, want)
		var paged []string
		f.Limit = 4
		for range len(want) {
			page, err := e.db.ListTasks(e.ctx, f)
			require.NoError(t, err)
			for _, tk := range page.Tasks {
				paged = append(paged, tk.ID)
			}
			if page.NextCursor == "" {
				break
			}
			f.After = page.NextCursor
		}
		require.Equal(t, want, paged, "%+v", f)
	}
}
