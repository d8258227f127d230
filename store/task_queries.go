package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskFilter selects tasks for the admin list. Zero values do not filter.
type TaskFilter struct {
	Status     events.Status
	TaskTypeID string
	Priority   events.Priority
	AssignedTo string
	Unassigned bool // pending tasks nobody holds: the queue
	Retries    bool // retry tasks only (retry_count > 0)
	// Stuck keeps tasks in progress whose holder is offline or silent past
	// the offline threshold, and pending tasks pre-assigned to a worker
	// silent past it (as the stats count them).
	Stuck bool
	// Search keeps tasks whose title contains it, case-insensitively (the
	// trigram index of task_titles, migration 014; title_search.go).
	Search string
	// Cancellable keeps tasks a cancel applies to (not ended); Retryable
	// failed tasks without a retry yet. The bulk actions set them, so a
	// count and a walk see only what the action would change.
	Cancellable bool
	Retryable   bool
	// Sort is the list's order; the cursor After belongs to it.
	Sort  TaskSort
	After string
	Limit int
}

// TaskPage is one page of tasks, newest first.
type TaskPage struct {
	Tasks      []events.Task `json:"tasks"`
	NextCursor string        `json:"next_cursor,omitempty"`
	QueueDepth int           `json:"queue_depth"`
}

// ListTasks pages through tasks in f.Sort's order (newest first by
// default), by keyset.
func (db *DB) ListTasks(ctx context.Context, f TaskFilter) (*TaskPage, error) {
	if f.Limit <= 0 || f.Limit > 200 {
		f.Limit = 50
	}
	if f.Search != "" {
		db.loadTitleSample(ctx)
	}
	sql, args, err := db.listTasksSQL(f)
	if err != nil {
		return nil, err
	}
	var tasks []events.Task
	if f.Search != "" {
		tasks, err = db.searchTasks(ctx, sql, args)
	} else {
		tasks, err = db.queryTasks(ctx, db.pool, sql, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	page := &TaskPage{Tasks: tasks}
	if len(tasks) > f.Limit {
		page.Tasks = tasks[:f.Limit]
		page.NextCursor = f.Sort.Cursor(&page.Tasks[f.Limit-1])
	}
	if page.QueueDepth, err = db.QueueDepth(ctx); err != nil {
		return nil, err
	}
	return page, nil
}

// listTasksSQL is the query of one page of f, one row more than f.Limit.
func (db *DB) listTasksSQL(f TaskFilter) (string, []any, error) {
	return db.pageSQL(f, taskColumns, f.Limit+1)
}

// pageSQL selects cols of the first limit tasks of f in the list order.
func (db *DB) pageSQL(f TaskFilter, cols string, limit int) (string, []any, error) {
	if !f.Sort.Valid() {
		return "", nil, events.Invalid("sort", "must be %s", sortNames())
	}
	if err := f.Sort.checkFilter(f); err != nil {
		return "", nil, err
	}
	var args sqlArgs
	stuck := f.Stuck
	f.Stuck = false // stuckPage applies it
	where, err := db.taskWhere(f, &args)
	if err != nil {
		return "", nil, err
	}
	lim := args.add(limit)
	sp := f.Sort.spec()
	if sp.cond != "" {
		where += " AND " + sp.cond
	}
	switch {
	case stuck:
		// checkFilter keeps the stuck filter to the created orders.
		return stuckPage(cols, where, sp.order(), lim, args.add(db.Now().Add(-db.offlineAfter))), args, nil
	case sp.statuses != nil && f.Status == "":
		// The index leads with the status: one scan of each, merged.
		conds := make([]string, len(sp.statuses))
		for i, st := range sp.statuses {
			conds[i] = "t.status = '" + string(st) + "'"
		}
		return merged(cols, where, sp.order(), lim, conds), args, nil
	case f.AssignedTo != "" && f.Status == "":
		return merged(cols, where, sp.order(), lim, heldOrNot), args, nil
	}
	sql := `SELECT ` + cols + ` FROM worker_tasks t WHERE ` + where +
		` ORDER BY ` + sp.order() + ` LIMIT ` + lim
	return sql, args, nil
}

func sortNames() string {
	names := make([]string, 0, len(TaskSorts))
	for _, s := range TaskSorts[1:] {
		names = append(names, string(s))
	}
	return "empty (newest first), " + strings.Join(names, ", ")
}

// sqlArgs collects a statement's parameters.
type sqlArgs []any

// add appends v and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return fmt.Sprintf("$%d", len(*a))
}

// taskWhere is the condition on worker_tasks t that f sets, one for the
// list, the count and the bulk walk alike.
func (db *DB) taskWhere(f TaskFilter, args *sqlArgs) (string, error) {
	where := []string{"true"}
	arg := args.add
	if f.Status != "" {
		// A literal, not a parameter: worker_tasks_status and the indexes
		// of one status are partial, and only a literal proves a
		// predicate, whatever plan caching does (migration 015).
		if !f.Status.Valid() {
			return "", events.Invalid("status", "unknown status %q", f.Status)
		}
		where = append(where, "t.status = '"+string(f.Status)+"'")
	}
	if f.TaskTypeID != "" {
		where = append(where, "t.task_type_id = "+arg(f.TaskTypeID))
	}
	if f.Priority != "" {
		where = append(where, "t.priority = "+arg(string(f.Priority)))
	}
	if f.AssignedTo != "" {
		where = append(where, "t.assigned_to = "+arg(f.AssignedTo))
	}
	if f.Unassigned {
		where = append(where, "t.status = 'pending' AND t.assigned_to IS NULL")
	}
	if f.Retries {
		where = append(where, "t.retry_count > 0")
	}
	if f.Stuck {
		before := arg(db.Now().Add(-db.offlineAfter))
		where = append(where, `t.id IN (`+stuckInProgress(before)+` UNION ALL `+stuckPending(before)+`)`)
	}
	if f.Search != "" {
		where = append(where, "t.id IN (SELECT id FROM task_titles WHERE "+db.titleMatch(f.Search, arg)+")")
	}
	if f.Cancellable {
		where = append(where, "t.status IN ('pending', 'in_progress')")
	}
	if f.Retryable {
		where = append(where, "t.status = 'failed' AND t.retry_task_id IS NULL")
	}
	if f.After != "" {
		key, id, err := f.Sort.parseCursor(f.After)
		if err != nil {
			return "", err
		}
		sp := f.Sort.spec()
		past, cast := "<", ""
		if sp.asc {
			past = ">"
		}
		if _, ok := key.(time.Duration); ok {
			cast = "::interval"
		}
		where = append(where, fmt.Sprintf("(%s, t.id) %s (%s%s, %s)", sp.key, past, arg(key), cast, arg(id)))
	}
	return strings.Join(where, " AND "), nil
}

// heldOrNot splits one worker's tasks between its two indexes: those in
// progress (worker_tasks_held) and the others (worker_tasks_assignee). No
// one index has both (migration 015).
var heldOrNot = []string{"t.status <> 'in_progress'", "t.status = 'in_progress'"}

// merged is the first limit tasks in order of those that match where, one
// scan for each of conds, each read in its index's order, merged.
func merged(cols, where, order, limit string, conds []string) string {
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = `(SELECT t.* FROM worker_tasks t WHERE ` + where + ` AND ` + c +
			` ORDER BY ` + order + ` LIMIT ` + limit + `)`
	}
	return `SELECT ` + cols + ` FROM (` + strings.Join(parts, ` UNION ALL `) + `) t ORDER BY ` + order + ` LIMIT ` + limit
}

// serialPlan keeps a title search on one process. For a common term the
// plan walks worker_tasks_listing and looks each row's title up in
// task_titles; PostgreSQL may split that walk over parallel workers, whose
// start-up costs more than the walk (EXPLAIN ANALYZE on 100k tasks, a term
// in 3 % of titles: 19-25 ms in parallel, 4-12 ms on one process).
// set_config(..., true) lasts until the batch's implicit transaction ends.
const serialPlan = `SELECT set_config('max_parallel_workers_per_gather', '0', true)`

// searchTasks runs a task list query that searches titles, in one round trip.
func (db *DB) searchTasks(ctx context.Context, sql string, args []any) ([]events.Task, error) {
	b := &pgx.Batch{}
	b.Queue(serialPlan)
	b.Queue(sql, args...)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, mapErr(err)
	}
	return collectTasks(br.Query())
}

// escapeLike makes a search term match literally in LIKE.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// QueueDepth counts pending tasks nobody holds (from task_counts).
func (db *DB) QueueDepth(ctx context.Context) (int, error) {
	c, err := db.Counts(ctx, db.pool)
	return c.Queued, err
}

func (db *DB) queryTasks(ctx context.Context, q Querier, sql string, args ...any) ([]events.Task, error) {
	return collectTasks(q.Query(ctx, sql, args...))
}

func collectTasks(rows pgx.Rows, err error) ([]events.Task, error) {
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Task, error) {
		var t events.Task
		err := r.Scan(taskDest(&t)...)
		normalizeTask(&t)
		return t, err
	})
	return out, mapErr(err)
}

// WorkerTasks lists the tasks assigned to a worker, newest first; active
// (pending or in progress) only unless all.
func (db *DB) WorkerTasks(ctx context.Context, workerID string, all bool) ([]events.Task, error) {
	if all {
		return db.queryTasks(ctx, db.pool, workerAllTasks, workerID)
	}
	return db.queryTasks(ctx, db.pool, workerActiveTasks, workerID)
}

// Two statements, not one with a flag: each gets its own plan, whatever
// plan caching does. All: the newest 200 from the top of
// worker_tasks_assignee and the tasks in progress. Active: the worker's few
// pending and in-progress tasks through worker_tasks_holder. Neither reads
// the worker's history (ADR 010).
var workerAllTasks = merged(taskColumns, `t.assigned_to = $1`, SortNewest.spec().order(), `200`, heldOrNot)

const (
	workerActiveTasks = `SELECT ` + taskColumns + ` FROM worker_tasks t
		WHERE t.assigned_to = $1 AND t.status IN ('pending', 'in_progress') ORDER BY t.created_at DESC, t.id DESC LIMIT 200`
)

// TaskUpdate is one message in a task's thread.
type TaskUpdate struct {
	ID        string    `json:"id"`
	AuthorID  *string   `json:"author_id"`
	Message   string    `json:"message"`
	CreatedAt time.Time `json:"created_at"`
}

// Assignment is one line of a task's assignment history.
type Assignment struct {
	TaskID string `json:"task_id"`
	// Version is the task stream version of the event that recorded it.
	Version        int       `json:"version"`
	WorkerID       string    `json:"worker_id"`
	WorkerName     string    `json:"worker_name"`
	AssignedBy     *string   `json:"assigned_by"`
	AssignedByName *string   `json:"assigned_by_name"`
	Kind           string    `json:"kind" openapi:"enum=assigned|claimed|released"`
	Reason         string    `json:"reason"`
	At             time.Time `json:"at"`
}

// TaskAssignments is a task's assignment history, oldest first: admin
// assignments, claims and releases, with the names of who was given the
// task and who gave it (none for the system).
func (db *DB) TaskAssignments(ctx context.Context, taskID string) ([]Assignment, error) {
	rows, err := db.pool.Query(ctx, `SELECT a.task_id, a.version, a.worker_id, coalesce(w.full_name, ''),
		a.assigned_by, b.full_name, a.kind, a.reason, a.at
		FROM task_assignments a
		LEFT JOIN users w ON w.id = a.worker_id
		LEFT JOIN users b ON b.id = a.assigned_by
		WHERE a.task_id = $1 ORDER BY a.version`, taskID)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Assignment])
	return out, mapErr(err)
}

// TaskDetail is a task with everything around it.
type TaskDetail struct {
	events.Task
	TaskType    *events.TaskType `json:"task_type"`
	Parent      *events.Task     `json:"parent"`
	Retries     []events.Task    `json:"retries"`
	Assignments []Assignment     `json:"assignments"`
	Updates     []TaskUpdate     `json:"updates"`
	// Data is what workers uploaded for the task (task data).
	Data []events.TaskData `json:"data"`
	// Checkpoint is the latest checkpoint of the task's retry chain: its
	// own, else an earlier attempt's (task_id says whose); what its next
	// attempt resumes from.
	Checkpoint *events.TaskCheckpoint `json:"checkpoint,omitempty"`
	// Dependencies are the tasks it depends on, as given; Dependents the
	// tasks that depend on it or on an earlier attempt of its chain (at
	// most MaxDependentsShown).
	Dependencies []events.Task `json:"dependencies,omitempty"`
	Dependents   []events.Task `json:"dependents,omitempty"`
}

// MaxDependentsShown bounds the dependents a task's detail lists.
const MaxDependentsShown = 200

// GetTaskWithType reads a task and its type.
func (db *DB) GetTaskWithType(ctx context.Context, id string) (*TaskWithType, error) {
	t, err := db.GetTask(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	tt, err := db.GetTaskType(ctx, db.pool, t.TaskTypeID)
	if err != nil {
		return nil, err
	}
	return &TaskWithType{Task: *t, TaskType: tt}, nil
}

// GetTaskDetail reads a task with its type, parent, child retries,
// assignment history and update thread.
func (db *DB) GetTaskDetail(ctx context.Context, id string) (*TaskDetail, error) {
	tw, err := db.GetTaskWithType(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &TaskDetail{Task: tw.Task, TaskType: tw.TaskType}
	if d.ParentTaskID != nil {
		if d.Parent, err = db.GetTask(ctx, db.pool, *d.ParentTaskID); err != nil {
			return nil, err
		}
	}
	if d.Retries, err = db.queryTasks(ctx, db.pool, `SELECT `+taskColumns+` FROM worker_tasks t
		WHERE t.parent_task_id = $1 ORDER BY t.created_at`, id); err != nil {
		return nil, err
	}
	if d.Assignments, err = db.TaskAssignments(ctx, id); err != nil {
		return nil, err
	}
	if d.Updates, err = db.TaskUpdates(ctx, id, 1000); err != nil {
		return nil, err
	}
	if d.Data, err = db.ListTaskData(ctx, id); err != nil {
		return nil, err
	}
	if d.MayResume() {
		if d.Checkpoint, err = db.LatestTaskCheckpoint(ctx, db.pool, id); err != nil {
			return nil, err
		}
	}
	if len(d.DependsOn) > 0 {
		if d.Dependencies, err = db.queryTasks(ctx, db.pool, `SELECT `+taskColumns+` FROM worker_tasks t
			WHERE t.id = ANY($1::uuid[]) ORDER BY t.created_at`, d.DependsOn); err != nil {
			return nil, err
		}
	}
	if d.Dependents, err = db.queryTasks(ctx, db.pool, `WITH RECURSIVE up(id) AS (
			SELECT $1::uuid
			UNION ALL
			SELECT w.parent_task_id FROM up JOIN worker_tasks w ON w.id = up.id WHERE w.parent_task_id IS NOT NULL)
		SELECT `+taskColumns+` FROM up JOIN task_dependencies e ON e.depends_on = up.id JOIN worker_tasks t ON t.id = e.task_id
		ORDER BY t.created_at LIMIT $2`, id, MaxDependentsShown); err != nil {
		return nil, err
	}
	return d, nil
}

// TaskUpdates returns the last limit messages of a task's thread, oldest first.
func (db *DB) TaskUpdates(ctx context.Context, taskID string, limit int) ([]TaskUpdate, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, author_id, message, created_at FROM (
		SELECT * FROM worker_task_updates WHERE task_id = $1 ORDER BY version DESC LIMIT $2
	) u ORDER BY version`, taskID, limit)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TaskUpdate])
	return out, mapErr(err)
}
