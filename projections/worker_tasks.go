package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskColumns are worker_tasks' event-derived columns, in TaskRow order.
var TaskColumns = []string{
	"id", "title", "description", "task_type_id", "params", "priority", "status",
	"assigned_to", "result", "retry_count", "parent_task_id", "created_by", "created_at",
	"started_at", "completed_at", "updated_at", "available_at", "failure_kind",
	"failure_reason", "retry_outcome", "retry_task_id", "version",
	"schedule_id", "schedule_run", "unique_key", "scheduled",
}

// TaskRow is the worker_tasks row of a folded task.
func TaskRow(t *events.Task) []any {
	return []any{
		t.ID, t.Title, t.Description, t.TaskTypeID, string(t.Params), string(t.Priority), string(t.Status),
		t.AssignedTo, nullJSON(t.Result), t.RetryCount, t.ParentTaskID, t.CreatedBy, t.CreatedAt,
		t.StartedAt, t.CompletedAt, t.UpdatedAt, t.AvailableAt, t.FailureKind,
		t.FailureReason, t.RetryOutcome, t.RetryTaskID, t.Version,
		t.ScheduleID, t.ScheduleRun, t.UniqueKey, t.Scheduled,
	}
}

var upsertTask = upsert("worker_tasks", TaskColumns, map[string]string{"params": "jsonb", "result": "jsonb"})

func queueTask(b *pgx.Batch, t *events.Task) {
	b.Queue(upsertTask, TaskRow(t)...)
}

func nullJSON(raw []byte) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}
