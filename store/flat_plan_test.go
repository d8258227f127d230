package store

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/archive"
)

// With a long history (200k events, 150k finished tasks of 50 workers
// spread over two months), the reads issue 10 found scanning history read
// only what they return (ADR 010): the events page and the log's head walk
// task_events_position, "completed today" is one worker_day_completions
// row a worker, and the stats read task_counts and the tasks in
// progress, never the finished ones.
func TestFlatReadPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 200k rows; skipped with -short")
	}
	e := newBatchEnv(t)
	var workers []string
	for i := range 50 {
		workers = append(workers, e.user(t, fmt.Sprintf("w%d", i), true, 2))
	}
	// Each a stream of its own, of the usual types, one in a thousand a
	// failure (what a reactor waits for).
	_, err := e.db.pool.Exec(e.ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
		SELECT 'task', gen_random_uuid(), 1,
		       CASE WHEN g % 1000 = 0 THEN 'task.failed' ELSE (ARRAY['task.created', 'task.claimed', 'task.completed', 'task.updated'])[1 + g % 4] END,
		       '{}', '{}', now() - (g || ' s')::interval
		  FROM generate_series(1, 200000) g`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO worker_tasks (id, title, task_type_id, priority, status, assigned_to,
		created_at, updated_at, available_at, completed_at, version)
		SELECT gen_random_uuid(), 'task ' || g, $1, 'medium', 'completed', ($2::uuid[])[1 + g % 50],
		       now() - (g * 17 || ' s')::interval, now(), now(), now() - (g * 17 || ' s')::interval, 5
		  FROM generate_series(1, 150000) g`, e.typeID, workers)
	require.NoError(t, err)
	// Rows written behind the store's back: their counts too (ADR 010), and
	// their titles.
	_, err = e.db.pool.Exec(e.ctx, `UPDATE task_counts SET completed = completed + 150000 WHERE pid = 0`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO task_titles (id, title) SELECT id, title FROM worker_tasks`)
	require.NoError(t, err)
	for _, sql := range []string{`VACUUM ANALYZE task_events`, `VACUUM ANALYZE worker_tasks`, `VACUUM ANALYZE task_titles`, `ANALYZE users`} {
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
			t.Logf("%s\n%s", sql, p)
		}
		return p
	}

	// The log is partitioned by day (migration 054, ADR 034): a pass makes
	// the past days' partitions (their events move out of the default one)
	// and the week ahead. Every read of the log below names the times it
	// needs (log marks, a window, a task's life) and is one index scan per
	// partition of those times, of that partition's copy of the index the
	// read was built for, merged in order: no sort, no scan of a whole
	// partition, and no partition outside its times planned at all.
	_, err = e.db.MaintainPartitions(e.ctx, PartitionPolicy{Kind: archive.Day, Ahead: 7})
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `ANALYZE task_events`)
	require.NoError(t, err)
	parts, err := EventPartitions(e.ctx, e.db.pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(parts), 11, "three past days, today, seven ahead: %v", parts)
	var inDefault int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM task_events_default`).Scan(&inDefault))
	require.Zero(t, inDefault)
	// A partition ahead is empty until its day: its scan reads nothing,
	// whichever the planner picks.
	empty := map[string]bool{}
	for _, part := range parts {
		var n int
		require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+part.Name).Scan(&n))
		empty[part.Name] = n == 0
	}
	// within lists the partitions a read of b's times may plan: those that
	// overlap them, and the default one when b is open-ended.
	within := func(b timeBounds) map[string]bool {
		out := map[string]bool{}
		for _, part := range parts {
			if part.Default {
				out[part.Name] = b.until.IsZero() || b.from.IsZero()
				continue
			}
			out[part.Name] = (b.until.IsZero() || part.From.Before(b.until)) && (b.from.IsZero() || part.To.After(b.from))
		}
		return out
	}
	perPartition := func(p string, b timeBounds, indexes ...string) {
		t.Helper()
		// A sort is of what index scans found (a page of each type, a
		// stream's events), never of a partition's rows: none under the
		// merge of the partitions' scans.
		lines := strings.Split(p, "\n")
		for i, l := range lines {
			at := strings.Index(l, "Merge Append")
			if at < 0 {
				continue
			}
			for _, c := range lines[i+1:] {
				ind := len(c) - len(strings.TrimLeft(c, " "))
				if ind <= at-4 {
					break // past the merge's children
				}
				if ind == at+2 && strings.HasPrefix(strings.TrimLeft(c, " "), "->") {
					require.NotRegexp(t, `^->  (Incremental )?Sort  \(`, strings.TrimLeft(c, " "), "a sort under a merge:\n%s", p)
				}
			}
		}
		in := within(b)
		planned := 0
		for _, part := range parts {
			any := regexp.MustCompile(` on ` + part.Name + ` `)
			if !in[part.Name] {
				require.NotRegexp(t, any, p, "%s is outside %v", part.Name, b)
				continue
			}
			planned++
			if empty[part.Name] {
				require.Len(t, any.FindAllString(p, -1), len(indexes), "%s:\n%s", part.Name, p)
				continue
			}
			require.NotContains(t, p, "Seq Scan on "+part.Name+" ", p)
			times := map[string]int{}
			for _, idx := range indexes {
				times[idx]++
			}
			for idx, n := range times {
				// An ordered index scan, or a bitmap scan of the index for a
				// rare type (then sorted: the rows it found, not a partition's).
				scan := regexp.MustCompile(`(Index (Only )?Scan (Backward )?using ` + part.Name + `_` + idx + ` on ` + part.Name + ` |Bitmap Index Scan on ` + part.Name + `_` + idx + ` )`)
				require.Len(t, scan.FindAllString(p, -1), n, "%s of %s:\n%s", idx, part.Name, p)
			}
			require.Len(t, any.FindAllString(p, -1), len(indexes), "%s is read once per index:\n%s", part.Name, p)
		}
		if !b.from.IsZero() && !b.until.IsZero() {
			require.LessOrEqual(t, planned, 3, "a bounded read plans the partitions of its times:\n%s", p)
		}
	}
	midnight := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := timeBounds{from: midnight.Add(-22 * time.Hour), until: midnight.Add(2 * time.Hour)}
	recent := timeBounds{from: time.Now().Add(-logWindow)}
	// Events page, first and middle, and the live tail (the same read from
	// the last position): an ordered walk of the position index, within
	// the window of the position's mark (readLogBounded), or from the mark
	// on near the head.
	for _, b := range []timeBounds{yesterday, recent} {
		for _, after := range []events.Position{{}, {TxID: 1, Seq: 100_000}} {
			sql, args := readLogSQL(after, 500, LogFilter{}, b)
			p := plan(sql, args...)
			// Merged in order, never sorted after the fact (ADR 034: the
			// synthetic 1M log, one tx_id a partition, gets the sort).
			require.Regexp(t, `^Limit[^\n]*\n\s+->  Merge Append`, p)
			perPartition(p, b, "position")
		}
	}
	// The head: one probe from the end of the same index, in the last day.
	var args []any
	p := plan(logHeadSQL(recent, &args), args...)
	require.Contains(t, p, "Scan Backward using", p)
	perPartition(p, recent, "position")
	// A consumer's (a reactor's) read of its types from its position: the
	// type index; a worker's events: its three indexes; a task's timeline:
	// the stream index over the task's life.
	sql, args := readLogSQL(events.Position{TxID: 1, Seq: 100_000}, 100, LogFilter{Types: []string{"task.failed"}}, yesterday)
	perPartition(plan(sql, args...), yesterday, "type")
	sql, args = readLogSQL(events.Position{TxID: 1, Seq: 100_000}, 100, LogFilter{WorkerID: workers[0]}, yesterday)
	perPartition(plan(sql, args...), yesterday, "worker", "actor", "stream")
	args = []any{workers[0]}
	perPartition(plan(`SELECT seq FROM task_events WHERE stream_id = $1`+yesterday.render("occurred_at", &args)+` ORDER BY version`, args...),
		yesterday, "stream")
	// The newest events of a type, of a worker (the live events page's
	// start), in the last day.
	sql, args = recentEventsSQL(100, LogFilter{Types: []string{"task.failed", "task.retried"}}, recent)
	perPartition(plan(sql, args...), recent, "type", "type")
	sql, args = recentEventsSQL(100, LogFilter{WorkerID: workers[0]}, recent)
	perPartition(plan(sql, args...), recent, "worker", "actor", "stream")
	// A reactor's probes and the auth changes after a position.
	args = []any{"probe"}
	perPartition(plan(pendingSQL([]string{"task.failed"}, yesterday, &args), args...), yesterday, "type", "type")
	args = []any{"1", 0, 100}
	authTypes := make([]string, len(events.AuthEventTypes))
	for i := range authTypes {
		authTypes[i] = "type"
	}
	perPartition(plan(authChangesSQL(yesterday, &args), args...), yesterday, authTypes...)
	// The rate limits' claims in their window: the gated-claims index.
	perPartition(plan(limitedTypes("$1::timestamptz", "100", "true"), time.Now()), recent, "gated_claims")

	// Workers: today's completions one counter row each, held tasks by holder.
	p = plan(workerViewsSQL(`u.is_worker`), time.Now().UTC().Truncate(24*time.Hour))
	require.Contains(t, p, "Index Scan using worker_day_completions_pkey", p)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
	require.NotContains(t, p, "worker_tasks_status", p)

	// The dashboard's last hour: sixty minutes of task_minutes by its key,
	// whatever the months of minutes behind them; a schedule's stats: its
	// own counter rows among many schedules'.
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO task_minutes (minute, pid, completed)
		SELECT date_trunc('minute', now()) - (g || ' min')::interval, g % 4, 1 FROM generate_series(1, 200000) g`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO schedule_counts (schedule_id, pid, completed)
		SELECT gen_random_uuid(), g % 4, 1 FROM generate_series(1, 50000) g`)
	require.NoError(t, err)
	for _, sql := range []string{`ANALYZE task_minutes`, `ANALYZE schedule_counts`} {
		_, err = e.db.pool.Exec(e.ctx, sql)
		require.NoError(t, err)
	}
	start, end := e.db.lastHour()
	p = plan(lastHourMinutes, start, end)
	require.Regexp(t, `Index (Only )?Scan using task_minutes_pkey`, p)
	require.NotContains(t, p, "Seq Scan", p)
	p = plan(scheduleCountsSQL, uuid.NewString())
	require.Regexp(t, `Index Scan using schedule_counts_pkey|Bitmap Index Scan on schedule_counts_pkey`, p)
	require.NotContains(t, p, "Seq Scan", p)

	// A worker's tasks newest first: the top of worker_tasks_assignee, read
	// in order, merged with its few tasks in progress; its active ones
	// through an index of the active statuses only.
	p = plan(workerAllTasks, workers[0])
	require.Regexp(t, `Limit [^\n]*\n *->  Index Scan using worker_tasks_assignee`, p)
	require.Contains(t, p, "worker_tasks_held", p)
	require.NotContains(t, p, "Seq Scan", p)
	// The admin list filtered by worker: the same, a page at a time.
	sql, args, err = e.db.listTasksSQL(TaskFilter{AssignedTo: workers[0], Limit: 50})
	require.NoError(t, err)
	p = plan(sql, args...)
	require.Regexp(t, `Limit [^\n]*\n *->  Index Scan using worker_tasks_assignee`, p)
	require.NotContains(t, p, "Seq Scan", p)
	p = plan(workerActiveTasks, workers[0])
	require.True(t, strings.Contains(p, "worker_tasks_holder") || strings.Contains(p, "worker_tasks_status"), p)
	require.NotContains(t, p, "Seq Scan", p)

	// Stats: the totals are task_counts; the only worker_tasks read is the
	// tasks in progress.
	counts, err := e.db.Counts(e.ctx, e.db.pool)
	require.NoError(t, err)
	require.Equal(t, 150_000, counts.Completed)
	p = plan(stuckCount, time.Now())
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
	sql, args, err = e.db.listTasksSQL(TaskFilter{Stuck: true, Limit: 50})
	require.NoError(t, err)
	p = plan(sql, args...)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
	require.Contains(t, p, "worker_tasks_waiting_for", p) // each silent worker's pending tasks (migration 056)
	s, err := e.db.Stats(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 150_000, s.ByStatus["completed"])

	// Title search, as ListTasks sends it (serialPlan first): a rare term
	// through the trigram index of task_titles, then worker_tasks by key; a
	// common one walks worker_tasks_listing and stops at the page's end.
	searchPlan := func(term string) string {
		t.Helper()
		sql, args, err := e.db.listTasksSQL(TaskFilter{Search: term, Limit: 50})
		require.NoError(t, err)
		tx, err := e.db.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer tx.Rollback(e.ctx)
		_, err = tx.Exec(e.ctx, serialPlan)
		require.NoError(t, err)
		rows, err := tx.Query(e.ctx, `EXPLAIN `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	p = searchPlan("task 12345")
	require.Contains(t, p, "task_titles_title_trgm", p)
	require.Contains(t, p, "worker_tasks_pkey", p)
	require.NotContains(t, p, "Seq Scan", p)
	// With the planner's sample of titles read, the index reads the rare
	// word only ("task" is in every title) and the term is a filter.
	e.db.loadTitleSample(e.ctx)
	p = searchPlan("task 12345")
	require.Regexp(t, `Bitmap Index Scan on task_titles_title_trgm[^\n]*\n *Index Cond: \(title ~~\* '%12345%'::text\)`, p)
	require.Contains(t, p, "Filter: ((title || ''::text) ~~* '%task 12345%'::text)", p)
	require.Contains(t, p, "worker_tasks_pkey", p)
	require.NotContains(t, p, "Seq Scan", p)
	p = searchPlan("task 1")
	require.Contains(t, p, "worker_tasks_listing", p)
	require.NotContains(t, p, "Sort", p)
	require.NotContains(t, p, "Seq Scan", p)

	// The dashboard's capacity: the workers and the tasks in progress
	// (worker_tasks_held), never the finished ones.
	p = plan(fleetSlots, time.Now())
	require.Contains(t, p, "worker_tasks_held", p)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)

	// The backlog, for the dashboard's queue and every monitor sample: the
	// counter's rows (pending_counts, migration 040) and the types, never
	// the tasks; the sample reads worker_tasks only for the slots in use.
	p = plan(readBacklog)
	require.Contains(t, p, "pending_counts", p)
	require.NotContains(t, p, "worker_tasks", p)
	p = plan(sampleOps, time.Now())
	require.Contains(t, p, "pending_counts", p)
	require.Contains(t, p, "worker_tasks_held", p)
	require.NotRegexp(t, `Seq Scan on worker_tasks|worker_tasks_(status|listing|pkey|assignee)`, p)

	// Retry tasks only, newest or oldest first: worker_tasks_retries read in
	// order, whatever the originals around them (one task in ten a retry).
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET retry_count = 1 WHERE title LIKE '%0'`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `VACUUM ANALYZE worker_tasks`)
	require.NoError(t, err)
	for _, sort := range []TaskSort{SortNewest, SortOldest} {
		sql, args, err := e.db.listTasksSQL(TaskFilter{Retries: true, Sort: sort, Limit: 50})
		require.NoError(t, err)
		p = plan(sql, args...)
		require.Regexp(t, `Limit [^\n]*\n *->  Index Scan (Backward )?using worker_tasks_retries`, p)
		require.NotContains(t, p, "Sort", p)
	}

	// The account list, a page by name from a cursor: the top of
	// users_by_name from the previous page's last row, with 10,000 accounts
	// (last: more accounts would change the plans above).
	_, err = e.db.pool.Exec(e.ctx, `INSERT INTO users (id, email, full_name, is_worker, created_at, version)
		SELECT gen_random_uuid(), 'bulk' || g || '@example.com', 'Bulk ' || g, true, now(), 1
		  FROM generate_series(1, 10000) g`)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `ANALYZE users`)
	require.NoError(t, err)
	p = plan(workerViewsSQL(`u.is_worker AND (u.full_name, u.id) > ($2, $3::uuid)`)+` LIMIT 51`,
		time.Now().UTC().Truncate(24*time.Hour), "Bulk 5000", workers[0])
	require.Regexp(t, `Limit [^\n]*\n *->  [^\n]*Index Scan using users_by_name`, p)
	require.NotContains(t, p, "Sort", p)
	require.NotContains(t, p, "Seq Scan on users", p)
	// The UI's worker pickers (issue 24): the first 201 workers by name,
	// and the suggestions for a typed prefix, each from its index's top.
	p = plan(workersSQL, 201)
	require.Regexp(t, `Limit [^\n]*\n *->  [^\n]*Index Scan using users_by_name`, p)
	require.NotContains(t, p, "Sort", p)
	p = plan(matchWorkersSQL, "bulk 50", "bulk 50\U0010FFFF", 20)
	require.Contains(t, p, "Index Scan using users_workers_by_name_prefix", p)
	require.Contains(t, p, "Index Scan using users_workers_by_email_prefix", p)
	require.NotContains(t, p, "Seq Scan on users", p)

	// Compaction (ADR 035): the next page of chains walks the listing
	// index from its cursor; their events are read by stream.
	p = plan(chainRootsSQL, time.Now().Add(-30*24*time.Hour), uuid.NewString(), time.Now().Add(-20*24*time.Hour), 100)
	require.Contains(t, p, "worker_tasks_listing", p)
	require.NotContains(t, p, "Seq Scan", p)
	require.NotContains(t, p, "Sort", p)
	// Compaction's read of a batch of chains names no time (an event
	// stamped days behind must still be found, ADR 035): its stream index in
	// every partition.
	p = plan(compactEventsSQL, []string{uuid.NewString(), uuid.NewString()}, "day")
	perPartition(p, timeBounds{}, "stream")
	// The chains earlier passes left (migration 052): their blockers by id.
	p = plan(leftRootsSQL, uuid.NewString(), maxID, 100)
	require.NotContains(t, p, "Seq Scan on worker_tasks", p)
}
