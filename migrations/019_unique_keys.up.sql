-- Create once (ADR 018): a task may carry a unique key, unique among its
-- type's tasks that are pending or in progress. The partial unique index is
-- the guarantee, across instances and whatever path writes the row (a
-- create, a retry that keeps its parent's key). Tasks without a key are not
-- in either index, so they pay nothing for them.
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS unique_key text;

CREATE UNIQUE INDEX IF NOT EXISTS worker_tasks_unique_active ON worker_tasks (task_type_id, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'in_progress');

-- The window (unique_for): the last completed task with the key, newest first.
CREATE INDEX IF NOT EXISTS worker_tasks_unique_completed ON worker_tasks (task_type_id, unique_key, completed_at DESC)
    WHERE unique_key IS NOT NULL AND status = 'completed';
