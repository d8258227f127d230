package replay_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// After a random workload (and a task with usage, data, a checkpoint, a
// result and a thread), 40 days later with a 30-day retention: the archive
// holds every period, compaction replaces every finished chain's events by
// one task.compacted each, and every projection (tasks, counts, sums,
// thread, assignments, data, checkpoints) still equals the fold of the
// compacted log, of a rebuild from it, and of the archive plus the live
// log. A tampered archive object is refused by name, and the load from
// the archive writes nothing.
func TestCompactionKeepsProjections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 8)
	w.runConcurrently(ctx, t, 4, 500, 7)
	w.decideRetries(ctx, t)
	rich := richTask(ctx, t, w)

	later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: later})
	require.NoError(t, err)
	dir := t.TempDir()
	bs, err := blob.NewFS(dir)
	require.NoError(t, err)

	before := count(t, pool, `SELECT count(*) FROM task_events`)
	finished := count(t, pool, `SELECT count(*) FROM worker_tasks WHERE status IN ('completed', 'cancelled')
		OR (status = 'failed' AND retry_outcome IS NOT NULL)`)

	// Without an archive nothing is compacted.
	rep, err := db.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day})
	require.NoError(t, err)
	require.Zero(t, rep.Tasks)
	require.Positive(t, rep.Left["not archived yet"])

	arep, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
	require.NoError(t, err)
	require.Positive(t, arep.Periods)
	require.Equal(t, before, arep.Events, "every event is in the archive")

	for {
		rep, err = db.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day, Batch: 37})
		require.NoError(t, err)
		if rep.Done {
			break
		}
	}
	compacted := count(t, pool, `SELECT count(*) FROM task_events WHERE type = 'task.compacted'`)
	require.Positive(t, compacted)
	t.Logf("events %d -> %d; %d task.compacted; %d finished tasks; left %v", before,
		count(t, pool, `SELECT count(*) FROM task_events`), compacted, finished, rep.Left)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM task_events e JOIN worker_tasks w ON w.id = e.stream_id
		WHERE e.type <> 'task.compacted' AND w.status = 'completed' AND e.version < w.version`),
		"a completed task keeps one event")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM worker_tasks WHERE status IN ('pending', 'in_progress', 'blocked')
		AND id IN (SELECT stream_id FROM task_events WHERE type = 'task.compacted')`), "no open task is compacted")

	// What the rich task keeps.
	var p events.TaskCompacted
	stream, err := db.Stream(ctx, pool, rich)
	require.NoError(t, err)
	require.Len(t, stream, 1)
	p = stream[0].Payload.(events.TaskCompacted)
	require.Equal(t, events.StatusCompleted, p.Task.Status)
	require.Len(t, p.Attempts, 1)
	require.Equal(t, "completed", p.Attempts[0].Outcome)
	require.NotNil(t, p.Result)
	require.NotNil(t, p.Params)
	require.NotNil(t, p.Checkpoint)
	require.Equal(t, 1, p.Updates)
	require.Len(t, p.Data, 1)
	require.Contains(t, typesOf(p.Usage), "task.usage_reported")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM worker_task_updates WHERE task_id = $1`, rich))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM task_checkpoints WHERE task_id = $1`, rich))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM task_data WHERE task_id = $1`, rich))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM llm_usage_tasks WHERE task_id = $1`, rich))

	requireClean(t, verify(t, pool))

	// A second pass finds nothing new.
	rep, err = db.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day})
	require.NoError(t, err)
	require.Zero(t, rep.Tasks)

	// The archive plus the live log folds to the live projections too.
	load, err := replay.LoadArchive(ctx, pool, bs, archive.Day)
	require.NoError(t, err)
	require.Equal(t, before, load.Events)
	vrep, err := replay.Verify(ctx, pool, replay.VerifyConfig{EventsSchema: replay.ArchiveSchema})
	require.NoError(t, err)
	requireClean(t, vrep)
	require.Greater(t, vrep.Events, count(t, pool, `SELECT count(*) FROM task_events`))

	// A rebuild from the compacted log verifies clean.
	_, err = replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	requireClean(t, verify(t, pool))

	// One byte changed in an object: verify names it; the load refuses
	// before writing anything.
	periods, err := archive.List(ctx, bs, archive.Day)
	require.NoError(t, err)
	obj := filepath.Join(dir, filepath.FromSlash(periods[0].Key()))
	b, err := os.ReadFile(obj)
	require.NoError(t, err)
	b[len(b)/2] ^= 0xff
	require.NoError(t, os.WriteFile(obj, b, 0o600))
	_, err = archive.VerifyObject(ctx, bs, periods[0])
	require.Error(t, err)
	require.True(t, errors.Is(err, archive.ErrMismatch), "%v", err)
	require.Contains(t, err.Error(), periods[0].Key())
	_, err = pool.Exec(ctx, `DROP SCHEMA replay_archive CASCADE`)
	require.NoError(t, err)
	_, err = replay.LoadArchive(ctx, pool, bs, archive.Day)
	require.Error(t, err)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM pg_namespace WHERE nspname = 'replay_archive'`))
}

func typesOf(cs []events.Counted) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Type)
	}
	return out
}

// richTask runs one task through everything a compaction drops or keeps:
// params, a thread message, a checkpoint, a data object, usage, a result.
func richTask(ctx context.Context, t *testing.T, w *workload) string {
	t.Helper()
	db := w.db
	worker := w.workers[0]
	wm := w.workerMeta(worker)
	tk, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: w.types[0], NewTaskParams: events.NewTaskParams{
		Title: "rich", Params: []byte(`{"url": "https://example.com/a"}`), AssignedTo: worker}}, w.admin)
	require.NoError(t, err)
	_, _, err = db.UpdateTask(ctx, db.Pool(), tk.ID, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
	require.NoError(t, err)
	_, _, err = db.UpdateTask(ctx, db.Pool(), tk.ID, wm, func(t *events.Task) ([]events.Payload, error) {
		return t.PostUpdate(uuid.NewString(), worker, "half way", true)
	})
	require.NoError(t, err)
	_, err = db.SaveTaskCheckpoint(ctx, tk.ID, worker, []byte(`{"page": 3}`), wm)
	require.NoError(t, err)
	_, err = db.RecordDataUpload(ctx, store.DataUpload{TaskID: tk.ID, WorkerID: worker, DataType: "posts", Filename: "a.jsonl",
		Key: events.DataKey(tk.ID, "posts", "a.jsonl"), Size: 3, SHA256: "abc", ContentType: "application/x-ndjson",
		NewID: uuid.NewString()}, wm, func(context.Context) error { return nil })
	require.NoError(t, err)
	_, _, err = db.ReportUsage(ctx, tk.ID, worker, events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 100, OutputTokens: 50}, wm)
	require.NoError(t, err)
	_, _, err = db.UpdateTask(ctx, db.Pool(), tk.ID, wm, func(t *events.Task) ([]events.Payload, error) {
		return t.PostResult(worker, []byte(`{"posts": 3}`))
	})
	require.NoError(t, err)
	_, _, err = db.CompleteTask(ctx, tk.ID, worker, wm)
	require.NoError(t, err)
	return tk.ID
}

// A finished task of a workflow that still runs is left alone until the
// workflow's last task ends; then the whole workflow's tasks are compacted.
func TestCompactionLeavesRunningWorkflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 2)
	db := w.db
	worker := w.workers[0]
	wm := w.workerMeta(worker)
	task := func(title string) store.NewTaskParams {
		return store.NewTaskParams{TaskTypeID: w.types[0], NewTaskParams: events.NewTaskParams{Title: title, AssignedTo: worker}}
	}
	wf, err := db.CreateWorkflow(ctx, "two steps", []store.WorkflowTask{
		{Ref: "a", Task: task("first")}, {Ref: "b", DependsOn: []string{"a"}, Task: task("second")}}, w.admin)
	require.NoError(t, err)
	ids := map[string]string{}
	for _, n := range wf.Tasks {
		ids[n.Ref] = n.TaskID
	}
	finish := func(id string) {
		_, _, err := db.UpdateTask(ctx, db.Pool(), id, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
		require.NoError(t, err)
		_, _, err = db.CompleteTask(ctx, id, worker, wm)
		require.NoError(t, err)
	}
	finish(ids["a"])

	later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
	ldb, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: later})
	require.NoError(t, err)
	bs, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	compact := func() store.CompactReport {
		_, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
		require.NoError(t, err)
		rep, err := ldb.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day})
		require.NoError(t, err)
		return rep
	}
	rep := compact()
	require.Zero(t, rep.Tasks)
	require.Positive(t, rep.Left["its workflow is running"], "%v", rep.Left)

	var early, late int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1`, ids["b"]).Scan(&early))
	finish(ids["b"])
	// The workflow ended: its first task is compacted. The second one's
	// events came after their period was archived (this test's archive
	// runs 40 days ahead): no archive object holds them, so they stay, and
	// the period's next supplement is due.
	rep = compact()
	require.Equal(t, int64(1), rep.Tasks, "%v", rep.Left)
	require.Equal(t, int64(1), rep.Left["an event committed after its period was archived: in the next supplement"], "%v", rep.Left)
	stream, err := db.Stream(ctx, pool, ids["a"])
	require.NoError(t, err)
	require.Equal(t, "task.compacted", stream[0].Type)
	requireClean(t, verify(t, pool))

	// The next round writes the period's first supplement, with exactly
	// the late events, and compacts the second task against it.
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE stream_id = $1`, ids["b"]).Scan(&late))
	late -= early
	rep = compact()
	require.Equal(t, int64(1), rep.Tasks, "%v", rep.Left)
	stream, err = db.Stream(ctx, pool, ids["b"])
	require.NoError(t, err)
	require.Len(t, stream, 1)
	c, ok := stream[0].Payload.(events.TaskCompacted)
	require.True(t, ok)
	require.Len(t, c.Archives, 2, "its early events in the period's object, the late ones in its supplement")
	require.Regexp(t, `^events/day/\d{4}-\d\d-\d\d\.1\.jsonl\.gz$`, c.Archives[1])
	objects, err := archive.List(ctx, bs, archive.Day)
	require.NoError(t, err)
	var supplements []archive.Object
	for _, o := range objects {
		if o.Part > 0 {
			supplements = append(supplements, o)
		}
	}
	require.Len(t, supplements, 1)
	m, err := archive.VerifyObject(ctx, bs, supplements[0])
	require.NoError(t, err)
	require.Equal(t, int64(late), m.Events, "the supplement holds the late events, nothing an earlier object holds")
	var pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM event_archive_late`).Scan(&pending))
	require.Zero(t, pending)
	// Nothing more to write: a round finds no late event.
	again, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
	require.NoError(t, err)
	require.Zero(t, again.Periods+again.Supplements)
	requireClean(t, verify(t, pool))
	// The archive, supplements included, plus the live log fold to the
	// live projections, each event once.
	_, err = replay.LoadArchive(ctx, pool, bs, archive.Day)
	require.NoError(t, err)
	vrep, err := replay.Verify(ctx, pool, replay.VerifyConfig{EventsSchema: replay.ArchiveSchema})
	require.NoError(t, err)
	requireClean(t, vrep)
}

// A chain left open past the retention no longer makes every later pass
// walk the chains after it: the pass records it and moves on, and later
// passes revisit it alone, and only once its blocking task changed.
func TestCompactionRevisitsOnlyTheChainsItLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 1)
	db := w.db
	worker := w.workers[0]
	wm := w.workerMeta(worker)
	create := func(title string) string {
		tk, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: w.types[0], NewTaskParams: events.NewTaskParams{
			Title: title, AssignedTo: worker}}, w.admin)
		require.NoError(t, err)
		return tk.ID
	}
	finish := func(id string) {
		_, _, err := db.UpdateTask(ctx, db.Pool(), id, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
		require.NoError(t, err)
		_, _, err = db.CompleteTask(ctx, id, worker, wm)
		require.NoError(t, err)
	}
	open := create("open for long") // the oldest chain
	const done = 30
	for i := range done {
		finish(create(fmt.Sprintf("done %d", i)))
	}

	later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
	ldb, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: later})
	require.NoError(t, err)
	bs, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	compact := func() store.CompactReport {
		_, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
		require.NoError(t, err)
		rep, err := ldb.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day, Batch: 7})
		require.NoError(t, err)
		require.True(t, rep.Done)
		return rep
	}
	rep := compact()
	require.Equal(t, int64(done), rep.Tasks)
	require.Equal(t, int64(done+1), rep.Looked)
	require.Equal(t, int64(1), rep.Left["the task is pending"], "%v", rep.Left)

	// Nothing changed: a pass looks at nothing (it walked all 31 again).
	rep = compact()
	require.Zero(t, rep.Looked, "%+v", rep)

	// The open task is claimed: revisited (and left again, in progress);
	// then it completes (after its period was archived: a supplement) and
	// its chain is compacted; the list of chains left is empty.
	_, _, err = db.UpdateTask(ctx, db.Pool(), open, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
	require.NoError(t, err)
	rep = compact()
	require.Equal(t, int64(1), rep.Looked)
	require.Equal(t, int64(1), rep.Left["the task is in_progress"], "%v", rep.Left)
	_, _, err = db.CompleteTask(ctx, open, worker, wm)
	require.NoError(t, err)
	for range 3 {
		if rep = compact(); rep.Tasks > 0 {
			break
		}
	}
	require.Equal(t, int64(1), rep.Tasks, "%v", rep.Left)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM event_compaction_left`))
	require.Zero(t, compact().Looked)
	requireClean(t, verify(t, pool))
}

// Chains left for a reason every pass revisits (here: their workflow still
// runs) take at most half a pass: the sweep goes on behind them, and the
// revisits go round the list of chains left from where the last pass
// stopped.
func TestCompactionRevisitsDoNotStarveTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 1)
	db := w.db
	worker := w.workers[0]
	wm := w.workerMeta(worker)
	finish := func(id string) {
		_, _, err := db.UpdateTask(ctx, db.Pool(), id, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
		require.NoError(t, err)
		_, _, err = db.CompleteTask(ctx, id, worker, wm)
		require.NoError(t, err)
	}
	var steps []store.WorkflowTask
	for i := range 8 {
		steps = append(steps, store.WorkflowTask{Ref: fmt.Sprintf("s%d", i), Task: store.NewTaskParams{TaskTypeID: w.types[0],
			NewTaskParams: events.NewTaskParams{Title: fmt.Sprintf("step %d", i), AssignedTo: worker}}})
	}
	wf, err := db.CreateWorkflow(ctx, "eight steps", steps, w.admin)
	require.NoError(t, err)
	for _, n := range wf.Tasks[:7] {
		finish(n.TaskID) // the eighth stays pending: the workflow runs
	}
	const standalone = 12
	for i := range standalone {
		tk, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: w.types[0], NewTaskParams: events.NewTaskParams{
			Title: fmt.Sprintf("alone %d", i), AssignedTo: worker}}, w.admin)
		require.NoError(t, err)
		finish(tk.ID)
	}

	later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
	ldb, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: later})
	require.NoError(t, err)
	bs, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	_, err = archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
	require.NoError(t, err)
	var tasks int64
	passes := 0
	for ; passes < 30; passes++ {
		rep, err := ldb.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day, Batch: 2, MaxChains: 6})
		require.NoError(t, err)
		require.LessOrEqual(t, rep.Looked, int64(6))
		tasks += rep.Tasks
		if rep.Done {
			break
		}
	}
	require.Less(t, passes, 30, "the sweep never reached the retention's start")
	require.Equal(t, int64(standalone), tasks)
	require.Equal(t, int64(8), count(t, pool, `SELECT count(*) FROM event_compaction_left`), "the workflow's chains wait")
}

// An event stamped in a period the archive has passed without writing it
// (it had no event then: a writer's clock days behind) is late too: the
// next round writes that period's object, and its chain is compacted; the
// sweep does not stop at it waiting for an archive that would never come.
func TestCompactionArchivesAPeriodBehindTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 1)
	worker := w.workers[0]
	wm := w.workerMeta(worker)
	// The completion is written through ender.
	run := func(ender *store.DB, title string) string {
		tk, err := w.db.CreateTask(ctx, w.db.Pool(), store.NewTaskParams{TaskTypeID: w.types[0], NewTaskParams: events.NewTaskParams{
			Title: title, AssignedTo: worker}}, w.admin)
		require.NoError(t, err)
		_, _, err = w.db.UpdateTask(ctx, w.db.Pool(), tk.ID, wm, func(t *events.Task) ([]events.Payload, error) { return t.Claim(worker) })
		require.NoError(t, err)
		_, _, err = ender.CompleteTask(ctx, tk.ID, worker, wm)
		require.NoError(t, err)
		return tk.ID
	}
	run(w.db, "today")
	later := func() time.Time { return time.Now().Add(40 * 24 * time.Hour) }
	ldb, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: later})
	require.NoError(t, err)
	bs, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	compact := func() store.CompactReport {
		_, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
		require.NoError(t, err)
		rep, err := ldb.Compact(ctx, store.CompactConfig{Retention: 30 * 24 * time.Hour, Period: archive.Day})
		require.NoError(t, err)
		return rep
	}
	require.Equal(t, int64(1), compact().Tasks)

	// A task created now, and completed by an instance whose clock is five
	// days behind: its completion is stamped in a day the archive passed.
	back := func() time.Time { return time.Now().Add(-5 * 24 * time.Hour) }
	bdb, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: back})
	require.NoError(t, err)
	behind := run(bdb, "five days back")
	var tasks int64
	for range 3 {
		tasks += compact().Tasks
	}
	require.Equal(t, int64(1), tasks)
	stream, err := w.db.Stream(ctx, pool, behind)
	require.NoError(t, err)
	require.Len(t, stream, 1)
	c := stream[0].Payload.(events.TaskCompacted)
	require.Contains(t, c.Archives, archive.PeriodOf(archive.Day, back()).Key(), "the day's object, written from its late event")
	requireClean(t, verify(t, pool))
}
