package store

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// requireExactCounts checks the totals of task_counts, and each worker's
// completions per day, against a count of worker_tasks' rows after step.
func (e *batchEnv) requireExactCounts(t *testing.T, step string) TaskCounts {
	t.Helper()
	got, err := e.db.Counts(e.ctx, e.db.pool)
	require.NoError(t, err)
	var want TaskCounts
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `SELECT
		count(*) FILTER (WHERE status = 'pending'),
		count(*) FILTER (WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled),
		count(*) FILTER (WHERE status = 'in_progress'),
		count(*) FILTER (WHERE status = 'completed'),
		count(*) FILTER (WHERE status = 'failed'),
		count(*) FILTER (WHERE status = 'cancelled'),
		count(*) FILTER (WHERE status = 'failed' AND retry_outcome IS NULL),
		count(*) FILTER (WHERE status = 'failed' AND retry_outcome = 'exhausted'),
		count(*) FILTER (WHERE status = 'failed' AND retry_outcome = 'skipped'),
		count(*) FILTER (WHERE status = 'pending' AND scheduled)
		FROM worker_tasks`).Scan(&want.Pending, &want.Queued, &want.InProgress, &want.Completed, &want.Failed,
		&want.Cancelled, &want.AwaitingRetry, &want.RetriesExhausted, &want.RetriesSkipped, &want.Scheduled))
	require.Equal(t, want, got, "task_counts after %s", step)
	var days, differ int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `WITH want AS (
		SELECT assigned_to AS worker_id, (completed_at AT TIME ZONE 'UTC')::date AS day, count(*) AS completed
		  FROM worker_tasks WHERE status = 'completed' GROUP BY 1, 2)
		SELECT (SELECT count(*) FROM want),
		       (SELECT count(*) FROM want FULL JOIN worker_day_completions d USING (worker_id, day)
		         WHERE want.completed IS DISTINCT FROM d.completed)`).Scan(&days, &differ))
	require.Zero(t, differ, "worker_day_completions after %s: %d of %d worker days differ from worker_tasks", step, differ, days)
	var minutes int
	require.NoError(t, e.db.pool.QueryRow(e.ctx, `WITH want AS (
		SELECT minute, sum(completed) AS completed, sum(failed) AS failed, sum(retries) AS retries FROM (
		    SELECT date_trunc('minute', completed_at) AS minute, count(*) FILTER (WHERE status = 'completed') AS completed,
		           count(*) FILTER (WHERE status = 'failed') AS failed, 0 AS retries
		      FROM worker_tasks WHERE status IN ('completed', 'failed') GROUP BY 1
		    UNION ALL
		    SELECT date_trunc('minute', created_at), 0, 0, count(*) FROM worker_tasks WHERE retry_count > 0 GROUP BY 1) x
		 GROUP BY minute
	), live AS (
		SELECT minute, sum(completed) AS completed, sum(failed) AS failed, sum(retries) AS retries FROM task_minutes GROUP BY minute
	)
	SELECT (SELECT count(*) FROM want), (SELECT count(*) FROM want FULL JOIN live USING (minute)
	 WHERE (want.completed, want.failed, want.retries) IS DISTINCT FROM (live.completed, live.failed, live.retries))`).Scan(&minutes, &differ))
	require.Zero(t, differ, "task_minutes after %s: %d of %d minutes differ from worker_tasks", step, differ, minutes)
	requireExactBacklog(t, e.db, step)
	return got
}

// Every writer of worker_tasks keeps task_counts exact in its own
// statements (no trigger does since migration 013): after each kind of
// change the totals equal a count of the rows, and by the end every counter
// has moved.
func TestEveryWriterKeepsTheCountsExact(t *testing.T) {
	t.Parallel()
	e := newSchedEnv(t) // its type "crawl" allows no retry
	ctx, admin := e.ctx, e.admin
	var triggers int
	require.NoError(t, e.db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger
		WHERE tgrelid = 'worker_tasks'::regclass AND NOT tgisinternal`).Scan(&triggers))
	require.Zero(t, triggers, "the counts must be kept by the writers, not by a trigger")
	job, err := e.db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "job", Label: "Job", MaxRetries: 3,
		ParamSchema: []byte(`{"type":"object"}`)}, admin)
	require.NoError(t, err)
	w := e.user(t, "w", true, 50)
	v := e.user(t, "v", true, 50)
	gone := e.user(t, "gone", true, 5)
	as := func(worker string) events.Meta {
		return events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}}
	}
	newTask := func(assignee string) string {
		tk, err := e.db.CreateTask(ctx, e.db.pool, NewTaskParams{TaskTypeID: job.ID, NewTaskParams: events.NewTaskParams{
			Title: "t", Priority: events.PriorityMedium, Params: json.RawMessage(`{}`), AssignedTo: assignee}}, admin)
		require.NoError(t, err)
		return tk.ID
	}
	update := func(id string, meta events.Meta, decide TaskDecision) {
		t.Helper()
		_, _, err := e.db.UpdateTask(ctx, e.db.pool, id, meta, decide)
		require.NoError(t, err)
	}
	e.requireExactCounts(t, "nothing")

	// Creation: alone, in a caller's transaction, and batched.
	newTask("")
	newTask(w)
	require.NoError(t, e.db.WithTx(ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateTask(ctx, tx, NewTaskParams{TaskTypeID: job.ID, NewTaskParams: events.NewTaskParams{
			Title: "in tx", Priority: events.PriorityHigh, Params: json.RawMessage(`{}`)}}, admin)
		return err
	}))
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() { newTask("") })
	}
	wg.Wait()
	newTask(v)
	newTask(gone)
	e.requireExactCounts(t, "creations")

	// Claims: one; many, the assigned task first then the pool's; and many
	// workers' claims at once, batched into shared statements.
	one, err := e.db.Claim(ctx, v, as(v))
	require.NoError(t, err)
	require.NotNil(t, one)
	many, err := e.db.ClaimMany(ctx, w, 4, as(w))
	require.NoError(t, err)
	require.Len(t, many, 4)
	require.Equal(t, w, *many[0].AssignedTo)
	e.requireExactCounts(t, "claims")
	claimed := make(chan string, 64)
	for _, worker := range []string{w, v, w, v, w, v} {
		wg.Go(func() {
			got, err := e.db.ClaimMany(ctx, worker, 3, as(worker))
			if err == nil {
				for _, tk := range got {
					claimed <- tk.ID + " " + worker
				}
			}
		})
	}
	wg.Wait()
	close(claimed)
	e.requireExactCounts(t, "concurrent claims")
	var held []struct{ id, worker string }
	for s := range claimed {
		held = append(held, struct{ id, worker string }{s[:36], s[37:]})
	}
	require.GreaterOrEqual(t, len(held), 12)

	// Completions: one, many at once, and a worker's batch of mixed items
	// (plain completions, a result with its completion, a failure, one
	// already finished: its own error, nothing changed).
	_, _, err = e.db.CompleteTask(ctx, one.ID, v, as(v))
	require.NoError(t, err)
	e.requireExactCounts(t, "a completion")
	for _, h := range held[:6] {
		wg.Go(func() {
			_, _, err := e.db.CompleteTask(ctx, h.id, h.worker, as(h.worker))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	e.requireExactCounts(t, "concurrent completions")
	outs, err := e.db.FinishTasks(ctx, w, []Finish{
		{ID: many[0].ID, Status: events.StatusCompleted},
		{ID: many[1].ID, Status: events.StatusCompleted},
		{ID: many[2].ID, Status: events.StatusCompleted, Result: json.RawMessage(`{"ok":true}`)},
		{ID: many[3].ID, Status: events.StatusFailed, Reason: "broke"},
	}, as(w))
	require.NoError(t, err)
	for _, o := range outs {
		require.NoError(t, o.Err)
	}
	outs, err = e.db.FinishTasks(ctx, w, []Finish{{ID: many[0].ID, Status: events.StatusCompleted}}, as(w))
	require.NoError(t, err)
	require.Error(t, outs[0].Err, "already completed")
	e.requireExactCounts(t, "finished items")

	// Failure, then the retry reactor's decisions: a retry created, retries
	// skipped, then retried by hand, and exhausted (crawl allows none).
	failOne := func(worker string, typeID string) *events.Task {
		t.Helper()
		tk, err := e.db.CreateTask(ctx, e.db.pool, NewTaskParams{TaskTypeID: typeID, NewTaskParams: events.NewTaskParams{
			Title: "f", Priority: events.PriorityUrgent, Params: json.RawMessage(`{"ticker":"X"}`), AssignedTo: worker}}, admin)
		require.NoError(t, err)
		id := tk.ID
		got, err := e.db.Claim(ctx, worker, as(worker))
		require.NoError(t, err)
		require.Equal(t, id, got.ID)
		update(id, as(worker), func(t *events.Task) ([]events.Payload, error) {
			return t.Fail(worker, events.FailureError, "no", nil)
		})
		tk, err = e.db.GetTask(ctx, e.db.pool, id)
		require.NoError(t, err)
		return tk
	}
	failed := failOne(w, job.ID)
	e.requireExactCounts(t, "a failure")
	retry, err := e.db.CreateRetry(ctx, e.db.pool, failed.ID, RetryParams{Meta: admin})
	require.NoError(t, err)
	e.requireExactCounts(t, "a retry created")
	skipped := failOne(w, job.ID)
	update(skipped.ID, admin, func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped("permanent") })
	e.requireExactCounts(t, "a retry skipped")
	_, err = e.db.CreateRetry(ctx, e.db.pool, skipped.ID, RetryParams{Manual: true, Meta: admin})
	require.NoError(t, err)
	exhausted := failOne(w, e.typeID)
	update(exhausted.ID, admin, func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(0) })
	stillSkipped := failOne(v, job.ID)
	update(stillSkipped.ID, admin, func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped("permanent") })
	failOne(v, job.ID) // awaiting the decision
	e.requireExactCounts(t, "retry outcomes")

	// Admin commands: assign, cancel (pending and in progress), edit, a
	// posted update; the worker's release.
	queued := newTask("")
	update(queued, admin, func(t *events.Task) ([]events.Payload, error) { return t.Assign(v, "", "yours") })
	update(retry.ID, admin, func(t *events.Task) ([]events.Payload, error) { return t.Cancel("", "not needed") })
	update(held[6].id, admin, func(t *events.Task) ([]events.Payload, error) { return t.Cancel("", "stop") })
	title := "renamed"
	update(newTask(""), admin, func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Title: &title}) })
	update(held[7].id, as(held[7].worker), func(t *events.Task) ([]events.Payload, error) {
		return t.PostUpdate(uuid.NewString(), held[7].worker, "working", true)
	})
	update(held[8].id, as(held[8].worker), func(t *events.Task) ([]events.Payload, error) {
		return t.Release(held[8].worker, "cannot")
	})
	e.requireExactCounts(t, "admin commands and a release")

	// The stuck detector fails a task in progress; deactivating a worker
	// releases what it holds (in progress and assigned pending).
	stuck, err := e.db.GetTask(ctx, e.db.pool, held[9].id)
	require.NoError(t, err)
	ok, err := e.db.FailInProgress(ctx, stuck.ID, SystemFailure{StartedAt: *stuck.StartedAt,
		Kind: events.FailureWorkerOffline, Reason: "silent", Evidence: json.RawMessage(`{}`), Update: "failed: silent"}, admin)
	require.NoError(t, err)
	require.True(t, ok)
	got, err := e.db.Claim(ctx, gone, as(gone))
	require.NoError(t, err)
	require.NotNil(t, got)
	newTask(gone)
	_, err = e.db.DeactivateUser(ctx, gone, "left", admin)
	require.NoError(t, err)
	e.requireExactCounts(t, "stuck detection and a deactivation")

	// Run later: created scheduled (one assigned), one moved earlier, one
	// cancelled while it waits, then the time comes and task.due moves the
	// rest into the queue.
	later := e.db.Now().Add(time.Hour)
	var waiting []string
	for _, assignee := range []string{"", "", w, ""} {
		tk, err := e.db.CreateTask(ctx, e.db.pool, NewTaskParams{TaskTypeID: job.ID, NewTaskParams: events.NewTaskParams{
			Title: "later", Params: json.RawMessage(`{}`), AssignedTo: assignee, AvailableAt: &later}}, admin)
		require.NoError(t, err)
		require.True(t, tk.Scheduled)
		waiting = append(waiting, tk.ID)
	}
	sc := e.requireExactCounts(t, "scheduled creations")
	require.Equal(t, 4, sc.Scheduled)
	sooner := e.db.Now().Add(time.Minute)
	update(waiting[0], admin, func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{RunAt: &sooner}) })
	update(waiting[1], admin, func(t *events.Task) ([]events.Payload, error) { return t.Cancel("", "not needed") })
	e.requireExactCounts(t, "a run_at moved, a scheduled task cancelled")
	e.at(sooner.Add(time.Second))
	due, err := e.db.MakeDue(ctx, 10)
	require.NoError(t, err)
	require.Len(t, due, 1)
	e.requireExactCounts(t, "the first run_at came")
	e.at(later)
	due, err = e.db.MakeDue(ctx, 10)
	require.NoError(t, err)
	require.Len(t, due, 2)
	require.Zero(t, e.requireExactCounts(t, "every run_at came").Scheduled)

	// Schedules: a run now and a due firing each create a task.
	s := e.create(t, nil)
	_, _, err = e.db.RunScheduleNow(ctx, s.ID, requireTicker, admin)
	require.NoError(t, err)
	e.at(s.NextDueAt.Add(time.Second))
	require.Len(t, e.fire(t), 1)
	e.requireExactCounts(t, "schedule firings")

	e.at(e.db.Now().Add(2 * time.Minute))
	folded, err := e.db.FoldTaskMinutes(ctx)
	require.NoError(t, err)
	require.Positive(t, folded, "the finished minutes had rows of server processes")
	var unfolded int
	require.NoError(t, e.db.pool.QueryRow(ctx, `SELECT count(*) FROM task_minutes WHERE pid <> 0`).Scan(&unfolded))
	require.Zero(t, unfolded)
	c := e.requireExactCounts(t, "the end, the minutes folded")
	for name, n := range map[string]int{"pending": c.Pending, "queued": c.Queued, "in_progress": c.InProgress,
		"completed": c.Completed, "failed": c.Failed, "cancelled": c.Cancelled, "awaiting_retry": c.AwaitingRetry,
		"retries_exhausted": c.RetriesExhausted, "retries_skipped": c.RetriesSkipped} {
		require.Positive(t, n, "%s never moved: the test does not cover it", name)
	}
}

// A fold deletes per-process rows and inserts their sums: a column its
// INSERT leaves out is reset at every fold. Each fold names every column of
// its table.
func TestFoldsNameEveryCounterColumn(t *testing.T) {
	e := newBatchEnv(t)
	insertList := regexp.MustCompile(`INSERT INTO (\w+) AS \w+ \(([^)]*)\)`)
	for _, stmt := range []string{compactTaskCounts, compactPendingCounts, foldTaskMinutes, foldScheduleCountsSQL} {
		m := insertList.FindStringSubmatch(stmt)
		require.NotNil(t, m, "no INSERT in %s", stmt)
		var named []string
		for _, c := range strings.Split(m[2], ",") {
			named = append(named, strings.TrimSpace(c))
		}
		var columns []string
		rows, err := e.db.pool.Query(e.ctx, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1`, m[1])
		require.NoError(t, err)
		columns, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, columns, m[1])
		require.ElementsMatch(t, columns, named, "the fold of %s names every column", m[1])
	}
}
