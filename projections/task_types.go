package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskTypeColumns are task_types' columns, in TaskTypeRow order.
var TaskTypeColumns = []string{
	"id", "name", "label", "description", "sop", "param_schema", "max_retries",
	"timeout_seconds", "retry_backoff_seconds", "archived", "created_at", "updated_at", "version",
}

// TaskTypeRow is the task_types row of a folded type.
func TaskTypeRow(tt *events.TaskType) []any {
	return []any{
		tt.ID, tt.Name, tt.Label, tt.Description, tt.SOP, string(tt.ParamSchema), tt.MaxRetries,
		tt.TimeoutSeconds, tt.RetryBackoffSeconds, tt.Archived, tt.CreatedAt, tt.UpdatedAt, tt.Version,
	}
}

var upsertTaskType = upsert("task_types", TaskTypeColumns, map[string]string{"param_schema": "jsonb"})

func queueTaskType(b *pgx.Batch, tt *events.TaskType) {
	b.Queue(upsertTaskType, TaskTypeRow(tt)...)
}
