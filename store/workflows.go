package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// WorkflowTask is one task of a new workflow: its creation's parameters
// (params already checked against its type) and its ref.
type WorkflowTask struct {
	Ref       string
	DependsOn []string // refs
	Task      NewTaskParams
}

// CreateWorkflow creates a workflow and all its tasks in one transaction,
// or nothing: the graph is checked first (events.ValidateWorkflow), then
// each task as a creation; the first refusal is returned with its field
// under tasks[i]. Tasks that depend on others start blocked.
func (db *DB) CreateWorkflow(ctx context.Context, name string, tasks []WorkflowTask, meta events.Meta) (*WorkflowView, error) {
	nodes := make([]events.WorkflowNode, len(tasks))
	for i, t := range tasks {
		nodes[i] = events.WorkflowNode{Ref: t.Ref, DependsOn: t.DependsOn}
	}
	if err := events.ValidateWorkflow(name, nodes); err != nil {
		return nil, err
	}
	wid, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	ids := make(map[string]string, len(tasks))
	for _, t := range tasks {
		ids[t.Ref] = uuid.Must(uuid.NewV7()).String()
	}
	reqs := make([]createRequest, len(tasks))
	for i, t := range tasks {
		p := t.Task
		p.ID, p.WorkflowID, p.Ref = ids[t.Ref], wid.String(), t.Ref
		p.DependsOn = make([]string, len(t.DependsOn))
		for j, d := range t.DependsOn {
			p.DependsOn[j] = ids[d]
		}
		reqs[i] = createRequest{params: p, meta: meta}
	}
	err = db.WithTx(ctx, func(tx pgx.Tx) error {
		outs, err := db.createTasks(ctx, tx, reqs)
		if err != nil {
			return err
		}
		for i, o := range outs {
			if o.err != nil {
				return itemError(i, o.err)
			}
		}
		created := events.WorkflowCreated{Name: name, TaskCount: len(tasks), CreatedBy: meta.Actor.ID}
		if meta.Actor.Kind != events.ActorAdmin {
			created.CreatedBy = ""
		}
		_, _, err = appendStream(ctx, db, tx, events.StreamWorkflow, wid.String(), nil,
			[]events.Payload{created}, meta, db.projector.Workflow, nil)
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return db.GetWorkflow(ctx, wid.String())
}

// errNothingToDo tells a workflow's cancellation a task needs nothing.
var errNothingToDo = errors.New("nothing to do")

// itemError puts a task's refusal under its place in the workflow.
func itemError(i int, err error) error { return events.Under(fmt.Sprintf("tasks[%d]", i), err) }

// Workflow statuses, read from its tasks: running while any task may still
// run (blocked, pending, in progress, or failed with its retry undecided),
// completed when every task's chain completed, failed when it stopped
// otherwise, cancelled when an admin cancelled it.
const (
	WorkflowRunning   = "running"
	WorkflowCompleted = "completed"
	WorkflowFailed    = "failed"
	WorkflowCancelled = "cancelled"
)

// WorkflowProgress counts a workflow's tasks by the status of the latest
// task of each one's retry chain.
type WorkflowProgress struct {
	Total      int `json:"total"`
	Completed  int `json:"completed"`
	InProgress int `json:"in_progress"`
	Pending    int `json:"pending"`
	Blocked    int `json:"blocked"`
	Failed     int `json:"failed"`
	Cancelled  int `json:"cancelled"`
}

// WorkflowNode is one task of a workflow as its page shows it: the latest
// task of the ref's retry chain.
type WorkflowNode struct {
	Ref        string        `json:"ref"`
	TaskID     string        `json:"task_id"`
	Title      string        `json:"title"`
	Status     events.Status `json:"status"`
	RetryCount int           `json:"retry_count"`
	DependsOn  []string      `json:"depends_on" doc:"refs"`
}

// WorkflowView is a workflow with its status, progress and duration; Tasks
// only in a single workflow's answer.
type WorkflowView struct {
	events.Workflow
	Status          string           `json:"status" openapi:"enum=running|completed|failed|cancelled"`
	Progress        WorkflowProgress `json:"progress"`
	FinishedAt      *time.Time       `json:"finished_at"`
	DurationSeconds float64          `json:"duration_seconds" doc:"from creation to the end (or now, while running)"`
	Tasks           []WorkflowNode   `json:"tasks,omitempty"`
}

// workflowNodes reads the latest task of each ref of workflow $1.
const workflowNodes = `SELECT DISTINCT ON (t.ref) t.ref, t.id::text, t.title, t.status, t.retry_count,
       t.retry_outcome, t.completed_at
  FROM worker_tasks t WHERE t.workflow_id = $1
 ORDER BY t.ref, t.retry_count DESC`

// GetWorkflow reads a workflow with its tasks.
func (db *DB) GetWorkflow(ctx context.Context, id string) (*WorkflowView, error) {
	v := &WorkflowView{}
	err := db.pool.QueryRow(ctx, `SELECT id::text, name, task_count, created_by::text, created_at, cancelled_at, updated_at, version
		FROM workflows WHERE id = $1`, id).Scan(workflowDest(&v.Workflow)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("workflow", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("get workflow: %w", err))
	}
	nodes, err := db.readWorkflowNodes(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	v.summarize(nodes, db.Now())
	v.Tasks = make([]WorkflowNode, len(nodes))
	for i, n := range nodes {
		v.Tasks[i] = n.WorkflowNode
	}
	return v, nil
}

func workflowDest(w *events.Workflow) []any {
	return []any{&w.ID, &w.Name, &w.TaskCount, &w.CreatedBy, &w.CreatedAt, &w.CancelledAt, &w.UpdatedAt, &w.Version}
}

// nodeState is a node with what its workflow's status is read from.
type nodeState struct {
	WorkflowNode
	outcome     *string
	completedAt *time.Time
}

// readWorkflowNodes reads the workflow's nodes, their dependencies as refs.
func (db *DB) readWorkflowNodes(ctx context.Context, q Querier, id string) ([]nodeState, error) {
	rows, err := q.Query(ctx, workflowNodes, id)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read workflow tasks: %w", err))
	}
	var nodes []nodeState
	var deps []string
	refOf := map[string]string{} // original task id -> ref
	for rows.Next() {
		var n nodeState
		if err := rows.Scan(&n.Ref, &n.TaskID, &n.Title, &n.Status, &n.RetryCount, &n.outcome, &n.completedAt); err != nil {
			rows.Close()
			return nil, mapErr(fmt.Errorf("read workflow tasks: %w", err))
		}
		nodes = append(nodes, n)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("read workflow tasks: %w", err))
	}
	// Retries carry no dependencies: the chain's first task has them.
	firsts, err := q.Query(ctx, `SELECT id::text, ref, coalesce(depends_on, '{}')::text[] FROM worker_tasks
		WHERE workflow_id = $1 AND parent_task_id IS NULL`, id)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read workflow tasks: %w", err))
	}
	depsOf := map[string][]string{}
	var tid, ref string
	if _, err := pgx.ForEachRow(firsts, []any{&tid, &ref, &deps}, func() error {
		refOf[tid] = ref
		depsOf[ref] = deps
		return nil
	}); err != nil {
		return nil, mapErr(fmt.Errorf("read workflow tasks: %w", err))
	}
	for i := range nodes {
		refs := make([]string, 0, len(depsOf[nodes[i].Ref]))
		for _, d := range depsOf[nodes[i].Ref] {
			refs = append(refs, refOf[d])
		}
		nodes[i].DependsOn = refs
	}
	return nodes, nil
}

// summarize sets the workflow's status, progress and duration from its
// nodes.
func (v *WorkflowView) summarize(nodes []nodeState, now time.Time) {
	p := WorkflowProgress{Total: len(nodes)}
	running := false
	var last time.Time
	for _, n := range nodes {
		switch n.Status {
		case events.StatusCompleted:
			p.Completed++
		case events.StatusInProgress:
			p.InProgress++
		case events.StatusPending:
			p.Pending++
		case events.StatusBlocked:
			p.Blocked++
		case events.StatusFailed:
			p.Failed++
		case events.StatusCancelled:
			p.Cancelled++
		}
		if !n.Status.Terminal() || (n.Status == events.StatusFailed && n.outcome == nil) {
			running = true
		}
		if n.completedAt != nil && n.completedAt.After(last) {
			last = *n.completedAt
		}
	}
	v.Progress = p
	switch {
	case v.CancelledAt != nil:
		v.Status = WorkflowCancelled
		if last.Before(*v.CancelledAt) {
			last = *v.CancelledAt
		}
	case running:
		v.Status = WorkflowRunning
	case p.Completed == p.Total:
		v.Status = WorkflowCompleted
	default:
		v.Status = WorkflowFailed
	}
	end := now
	if v.Status != WorkflowRunning && !last.IsZero() {
		end = last.UTC()
		v.FinishedAt = &end
	}
	v.DurationSeconds = end.Sub(v.CreatedAt).Seconds()
	v.CreatedAt, v.UpdatedAt = v.CreatedAt.UTC(), v.UpdatedAt.UTC()
}

// WorkflowPage is a page of workflows, newest first.
type WorkflowPage struct {
	Workflows  []WorkflowView `json:"workflows"`
	NextCursor string         `json:"next_cursor,omitempty" doc:"pass as after for the next page"`
}

// ListWorkflows lists workflows newest first, limit (1-200) a page, after
// the cursor of the previous page (a workflow id).
func (db *DB) ListWorkflows(ctx context.Context, after string, limit int) (*WorkflowPage, error) {
	if limit <= 0 {
		limit = 50
	}
	args := []any{limit + 1}
	where := ""
	if after != "" {
		if _, err := uuid.Parse(after); err != nil {
			return nil, events.Invalid("after", "is not a cursor this list gave")
		}
		where = `WHERE (created_at, id) < (SELECT created_at, id FROM workflows WHERE id = $2)`
		args = append(args, after)
	}
	rows, err := db.pool.Query(ctx, `SELECT id::text, name, task_count, created_by::text, created_at, cancelled_at, updated_at, version
		FROM workflows `+where+` ORDER BY created_at DESC, id DESC LIMIT $1`, args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list workflows: %w", err))
	}
	var ws []events.Workflow
	var w events.Workflow
	if _, err := pgx.ForEachRow(rows, workflowDest(&w), func() error { ws = append(ws, w); return nil }); err != nil {
		return nil, mapErr(fmt.Errorf("list workflows: %w", err))
	}
	page := &WorkflowPage{Workflows: []WorkflowView{}}
	if len(ws) > limit {
		ws = ws[:limit]
		page.NextCursor = ws[limit-1].ID
	}
	now := db.Now()
	for _, w := range ws {
		nodes, err := db.readWorkflowNodes(ctx, db.pool, w.ID)
		if err != nil {
			return nil, err
		}
		v := WorkflowView{Workflow: w}
		v.summarize(nodes, now)
		page.Workflows = append(page.Workflows, v)
	}
	return page, nil
}

// CancelWorkflow cancels a workflow: workflow.cancelled, and in the same
// transaction every task of it that may still run is cancelled (a failed
// one awaiting its retry decision gets its retry skipped instead).
func (db *DB) CancelWorkflow(ctx context.Context, id, reason string, meta events.Meta) (*WorkflowView, error) {
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		var w events.Workflow
		err := tx.QueryRow(ctx, `SELECT id::text, name, task_count, created_by::text, created_at, cancelled_at, updated_at, version
			FROM workflows WHERE id = $1 FOR UPDATE`, id).Scan(workflowDest(&w)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return events.NotFound("workflow", id)
		}
		if err != nil {
			return fmt.Errorf("cancel workflow: %w", err)
		}
		ps, err := w.Cancel(meta.Actor.ID, reason)
		if err != nil {
			return err
		}
		if _, _, err := appendStream(ctx, db, tx, events.StreamWorkflow, id, &w, ps, meta, db.projector.Workflow, nil); err != nil {
			return err
		}
		nodes, err := db.readWorkflowNodes(ctx, tx, id)
		if err != nil {
			return err
		}
		why := "workflow cancelled"
		if reason != "" {
			why += ": " + reason
		}
		for _, n := range nodes {
			_, _, err := db.UpdateTask(ctx, tx, n.TaskID, meta, func(t *events.Task) ([]events.Payload, error) {
				switch {
				case t.Status == events.StatusFailed && t.RetryOutcome == nil:
					return t.RetrySkipped(why)
				case t.Status.Terminal(): // ended, or cancelled with a dependency just now
					return nil, errNothingToDo
				}
				return t.Cancel(meta.Actor.ID, why)
			})
			if err != nil && !errors.Is(err, errNothingToDo) {
				return fmt.Errorf("cancel workflow task %s: %w", n.Ref, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return db.GetWorkflow(ctx, id)
}
