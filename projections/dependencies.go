package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// DependencyColumns are task_dependencies' columns: one row per task and
// dependency, as the task's task.created gave them.
var DependencyColumns = []string{"task_id", "depends_on"}

// DependencyRows are the edges of a folded task.
func DependencyRows(t *events.Task) [][]any {
	rows := make([][]any, len(t.DependsOn))
	for i, d := range t.DependsOn {
		rows[i] = []any{t.ID, d}
	}
	return rows
}

// insertDependencies writes the edges of new tasks from their rows' depends_on.
const insertDependencies = `INSERT INTO task_dependencies (task_id, depends_on)
SELECT id, unnest(depends_on) FROM worker_tasks WHERE id = ANY($1::uuid[]) AND depends_on IS NOT NULL`

// WorkflowColumns are the workflows table's columns, in WorkflowRow order.
var WorkflowColumns = []string{"id", "name", "task_count", "created_by", "created_at", "cancelled_at", "updated_at", "version"}

// WorkflowRow is the workflows row of a folded workflow.
func WorkflowRow(w *events.Workflow) []any {
	return []any{w.ID, w.Name, w.TaskCount, w.CreatedBy, w.CreatedAt, w.CancelledAt, w.UpdatedAt, w.Version}
}

var upsertWorkflow = upsert("workflows", WorkflowColumns, nil)

// Workflow queues the write of a workflow's row.
func (Projector) Workflow(b *pgx.Batch, _, w *events.Workflow, _ []events.Envelope) {
	b.Queue(upsertWorkflow, WorkflowRow(w)...)
}
