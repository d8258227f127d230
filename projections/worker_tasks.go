package projections

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskColumns are worker_tasks' event-derived columns, in TaskRow order.
var TaskColumns = []string{
	"id", "title", "description", "task_type_id", "params", "priority", "status",
	"assigned_to", "result", "retry_count", "parent_task_id", "created_by", "created_at",
	"started_at", "completed_at", "updated_at", "available_at", "failure_kind",
	"failure_reason", "retry_outcome", "retry_task_id", "version",
	"schedule_id", "schedule_run", "unique_key", "scheduled", "checkpointed_at",
	"depends_on", "on_dependency_failure", "workflow_id", "ref",
}

// TaskRow is the worker_tasks row of a folded task.
func TaskRow(t *events.Task) []any {
	return []any{
		t.ID, t.Title, t.Description, t.TaskTypeID, string(t.Params), string(t.Priority), string(t.Status),
		t.AssignedTo, nullJSON(t.Result), t.RetryCount, t.ParentTaskID, t.CreatedBy, t.CreatedAt,
		t.StartedAt, t.CompletedAt, t.UpdatedAt, t.AvailableAt, t.FailureKind,
		t.FailureReason, t.RetryOutcome, t.RetryTaskID, t.Version,
		t.ScheduleID, t.ScheduleRun, t.UniqueKey, t.Scheduled, t.CheckpointedAt,
		t.DependsOn, t.OnDependencyFailure, t.WorkflowID, t.Ref,
	}
}

var upsertTask = upsert("worker_tasks", TaskColumns, map[string]string{"params": "jsonb", "result": "jsonb"})

// guardedUpsertTask writes an existing task's row only while it holds the
// version the writer folded from (the last parameter): the task stream's
// concurrency guard since the log is partitioned (migration 044, ADR 034).
// A writer that lost the race waits for the winner's row lock, finds the
// next version, updates nothing, and task_stream_lost_race() fails its
// batch, events and all (store maps it to events.ErrConflict).
var guardedUpsertTask = fmt.Sprintf(`WITH u AS (%s WHERE worker_tasks.version = $%d RETURNING 1)
SELECT task_stream_lost_race() WHERE NOT EXISTS (SELECT 1 FROM u)`, upsertTask, len(TaskColumns)+1)

// GateColumns are the columns of a task copied from its type rather than
// folded from its events: gated (the type is paused or limited) and the
// task's concurrency key (DESIGN §13). Replay derives them from the
// rebuilt types (store/replay).
var GateColumns = []string{"gated", "concurrency_key"}

// KeyOf is the SQL of a gated task's concurrency key: the value at its
// type's key path in its params, ” when they lack it, cut to
// events.MaxConcurrencyKey characters so an index entry stays small. params
// and path are SQL expressions; NULL when the path is.
func KeyOf(params, path string) string {
	return fmt.Sprintf(`CASE WHEN %[2]s IS NOT NULL THEN left(coalesce(jsonb_extract_path_text(%[1]s, VARIADIC %[2]s), ''), %[3]d) END`,
		params, path, events.MaxConcurrencyKey)
}

// insertTask writes a new task's row, its gate read from its type FOR KEY
// SHARE, as a foreign key check would: a pause or a change of limits locks
// the type row FOR UPDATE, so it waits for this insert to commit (and then
// regates the task) or this insert waits for it (and reads the new gate).
// A missing type leaves gated NULL, which the column refuses.
var insertTask = strings.NewReplacer(
	"INSERT INTO worker_tasks (", `WITH tt AS MATERIALIZED (
    SELECT gated, concurrency_key_path FROM task_types WHERE id = $4::uuid FOR KEY SHARE
) INSERT INTO worker_tasks (gated, concurrency_key, `,
	"VALUES (", "VALUES ((SELECT gated FROM tt), (SELECT CASE WHEN gated THEN "+KeyOf("$5::jsonb", "concurrency_key_path")+" END FROM tt), ",
).Replace(upsertTask)

// rekeyTask recomputes a gated task's key after its params changed.
var rekeyTask = `UPDATE worker_tasks w SET concurrency_key = ` + KeyOf("w.params", "tt.concurrency_key_path") + `
  FROM (SELECT concurrency_key_path FROM task_types WHERE id = $2 FOR KEY SHARE) tt
 WHERE w.id = $1 AND w.gated AND w.concurrency_key IS DISTINCT FROM ` + KeyOf("w.params", "tt.concurrency_key_path")

func queueTask(b *pgx.Batch, before, t *events.Task) {
	switch {
	case before == nil:
		b.Queue(insertTask, TaskRow(t)...)
		if len(t.DependsOn) > 0 {
			b.Queue(insertDependencies, []string{t.ID})
		}
	default:
		b.Queue(guardedUpsertTask, append(TaskRow(t), before.Version)...)
		if !bytes.Equal(before.Params, t.Params) {
			b.Queue(rekeyTask, t.ID, t.TaskTypeID)
		}
	}
}

func nullJSON(raw []byte) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}
