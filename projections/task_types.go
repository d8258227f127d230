package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskTypeColumns are task_types' columns, in TaskTypeRow order.
var TaskTypeColumns = []string{
	"id", "name", "label", "description", "sop", "param_schema", "max_retries",
	"timeout_seconds", "retry_backoff_seconds", "archived", "created_at", "updated_at", "version",
	"paused", "pause_reason", "paused_by", "paused_at",
	"max_in_progress", "rate_limit_count", "rate_limit_seconds", "concurrency_key", "concurrency_key_path",
	"max_in_progress_per_key", "alias", "params_template", "daily_token_budget", "daily_cost_budget_micro_usd",
}

// TaskTypeRow is the task_types row of a folded type.
func TaskTypeRow(tt *events.TaskType) []any {
	return []any{
		tt.ID, tt.Name, tt.Label, tt.Description, tt.SOP, string(tt.ParamSchema), tt.MaxRetries,
		tt.TimeoutSeconds, tt.RetryBackoffSeconds, tt.Archived, tt.CreatedAt, tt.UpdatedAt, tt.Version,
		tt.Paused, tt.PauseReason, tt.PausedBy, tt.PausedAt,
		tt.MaxInProgress, rateCount(tt.RateLimit), rateSeconds(tt.TypeLimits), tt.ConcurrencyKey, tt.KeyPath(),
		tt.MaxInProgressPerKey, nullString(tt.Alias), nullString(string(tt.ParamsTemplate)),
		tt.DailyTokenBudget, costBudget(tt.DailyCostBudgetUSD),
	}
}

// nullString is NULL for "": the alias's unique index leaves NULLs alone.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// costBudget is a cost budget in millionths of a dollar, the counters' unit.
func costBudget(usd *float64) *int64 {
	if usd == nil {
		return nil
	}
	micro := events.MicroUSD(*usd)
	return &micro
}

func rateCount(r *events.RateLimit) *int {
	if r == nil {
		return nil
	}
	return &r.Count
}

func rateSeconds(l events.TypeLimits) *int {
	if l.RateLimit == nil {
		return nil
	}
	s := int(l.RateWindow().Seconds())
	return &s
}

var upsertTaskType = upsert("task_types", TaskTypeColumns, map[string]string{"param_schema": "jsonb"})

func queueTaskType(b *pgx.Batch, tt *events.TaskType) {
	b.Queue(upsertTaskType, TaskTypeRow(tt)...)
}

// lockTypeForGate opens a change of a type's controls. FOR UPDATE
// conflicts with the FOR KEY SHARE every task insert takes on its type
// (insertTask) and with the claim's lock on a limited type: it waits for
// those in flight, and new ones wait for its commit. So regateTasks, a
// statement of its own whose snapshot is taken after the lock, sees every
// task of the type, and no task is created with the old gate after it.
const lockTypeForGate = `SELECT 1 FROM task_types WHERE id = $1 FOR UPDATE`

// regateTasks copies the type's gate and each task's key onto its open
// tasks (blocked, pending or in progress, so an unblocked or released task
// keeps them). It reads the type's blocked and pending tasks through the status index and those in progress
// through worker_tasks_held: its cost is the backlog and the tasks in
// progress, never the history (ADR 017).
//
// The ids are an array computed once (ARRAY(...)), not a join: a task a
// claim or a release moves between open statuses while this statement
// waits for its row must still be regated. Joined to the ids' subquery,
// PostgreSQL's recheck of the changed row (EvalPlanQual) dropped it, and a
// paused type kept claimable tasks (ADR 031, "Found on the way").
var regateTasks = `UPDATE worker_tasks w
   SET gated = tt.gated, concurrency_key = ` + gateKey + `
  FROM task_types tt
 WHERE tt.id = $1 AND w.id = ANY(ARRAY(
        SELECT id FROM worker_tasks WHERE status IN ('pending', 'blocked') AND task_type_id = $1
        UNION ALL
        SELECT id FROM worker_tasks WHERE status = 'in_progress' AND task_type_id = $1))
   AND (w.gated, w.concurrency_key) IS DISTINCT FROM (tt.gated, ` + gateKey + `)`

// gateKey is task w's key under type tt: NULL unless tt is gated.
var gateKey = `CASE WHEN tt.gated THEN ` + KeyOf("w.params", "tt.concurrency_key_path") + ` END`
