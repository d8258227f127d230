-- Pause a task type, and limits per type (DESIGN §13, ADR 017).
--
-- Folded from the type's events (task_type.paused / resumed, and the
-- limits in task_type.created / updated): paused and its reason, actor and
-- time; max_in_progress; rate_limit_count per rate_limit_seconds; the
-- concurrency key (the JSON path as given, and its steps as
-- jsonb_extract_path_text takes them) with max_in_progress_per_key.
ALTER TABLE task_types
    ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS pause_reason text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS paused_by text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS paused_at timestamptz,
    ADD COLUMN IF NOT EXISTS max_in_progress int,
    ADD COLUMN IF NOT EXISTS rate_limit_count int,
    ADD COLUMN IF NOT EXISTS rate_limit_seconds int,
    ADD COLUMN IF NOT EXISTS concurrency_key text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS concurrency_key_path text[],
    ADD COLUMN IF NOT EXISTS max_in_progress_per_key int;
-- A gated type's tasks are kept out of the claim's two indexes and claimed
-- only by its limited branch, which skips a paused type.
ALTER TABLE task_types ADD COLUMN IF NOT EXISTS gated boolean
    GENERATED ALWAYS AS (paused OR max_in_progress IS NOT NULL OR rate_limit_count IS NOT NULL
                         OR max_in_progress_per_key IS NOT NULL) STORED;
-- The claim's lock statement starts from the limited types that can take
-- claims: one probe of an index that is empty when no type has a limit.
CREATE INDEX IF NOT EXISTS task_types_limited ON task_types (id) WHERE gated AND NOT paused;

-- Where the limited branch's walk over the keys of a type starts next:
-- after the last key it served (round robin). Not a projection: replay
-- leaves it alone, and losing it only restarts the rotation.
ALTER TABLE task_types ADD COLUMN IF NOT EXISTS key_cursor text;

-- A gated task's key: the value at its type's concurrency_key path in its
-- params ('' when the params lack it), for the open tasks of a gated type
-- with a key; NULL otherwise. Copied, like worker_tasks.gated, by the
-- statements that insert tasks or change a type's controls.
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS concurrency_key text;

-- The limited branch: a gated type's claimable unassigned tasks, by key
-- and in claim order; a worker's claimable tasks of gated types; and the
-- gated tasks in progress by type and key (the counts the limits compare).
-- Only gated tasks have entries: types without controls pay nothing here.
CREATE INDEX IF NOT EXISTS worker_tasks_gated ON worker_tasks (task_type_id, concurrency_key, priority_rank, created_at, id)
    WHERE status = 'pending' AND gated AND NOT scheduled AND assigned_to IS NULL;
CREATE INDEX IF NOT EXISTS worker_tasks_gated_assigned ON worker_tasks (assigned_to, task_type_id, priority_rank, created_at, id)
    WHERE status = 'pending' AND gated AND NOT scheduled AND assigned_to IS NOT NULL;
CREATE INDEX IF NOT EXISTS worker_tasks_gated_running ON worker_tasks (task_type_id, concurrency_key)
    WHERE status = 'in_progress' AND gated;

-- A rate window is counted from the claims themselves: the claim adds the
-- type to the task.claimed of a gated task, and only those events have an
-- entry here.
CREATE INDEX IF NOT EXISTS task_events_gated_claims ON task_events ((data->>'task_type_id'), occurred_at)
    WHERE type = 'task.claimed' AND data ? 'task_type_id';
