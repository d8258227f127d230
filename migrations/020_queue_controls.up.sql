-- Queue controls (DESIGN §13, ADR 017): what keeps a pending task out of
-- the claim's two indexes.
--
-- scheduled: the task waits for its run_at (available_at). Folded from the
-- task's events: task.created or task.edited with a later run_at set it,
-- task.due (appended by each instance's timer when the time comes) clears it.
-- gated: the task's type is paused or limited; such tasks are claimed only
-- by the claim's limited branch, never from these indexes.
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS scheduled boolean NOT NULL DEFAULT false;
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS gated boolean NOT NULL DEFAULT false;

-- queued now counts only the unassigned tasks claimable by time;
-- scheduled counts the pending tasks still waiting for their run_at.
ALTER TABLE task_counts ADD COLUMN IF NOT EXISTS scheduled bigint NOT NULL DEFAULT 0;

-- Retries created with a backoff before this release wait the same way:
-- what the fold of their task.created says (available_at after created_at).
-- Those whose time already came are made due by the first timer that looks.
WITH s AS (
    UPDATE worker_tasks SET scheduled = true
     WHERE status = 'pending' AND available_at > created_at
    RETURNING assigned_to IS NULL AS unassigned
)
INSERT INTO task_counts AS c (pid, scheduled, queued)
SELECT 0, count(*), -count(*) FILTER (WHERE unassigned) FROM s
ON CONFLICT (pid) DO UPDATE SET scheduled = c.scheduled + excluded.scheduled, queued = c.queued + excluded.queued;

-- The claim's pool and a worker's assigned tasks: a task waiting for its
-- run_at or held by its type is not in them, so the claim never reads it.
DROP INDEX IF EXISTS worker_tasks_queue;
CREATE INDEX worker_tasks_queue ON worker_tasks (priority_rank, created_at, id)
    WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated;
DROP INDEX IF EXISTS worker_tasks_preassigned;
CREATE INDEX worker_tasks_preassigned ON worker_tasks (assigned_to, priority_rank, created_at, id)
    WHERE status = 'pending' AND assigned_to IS NOT NULL AND NOT scheduled AND NOT gated;

-- The timer's next run_at and the tasks it makes due, in time order.
CREATE INDEX IF NOT EXISTS worker_tasks_scheduled ON worker_tasks (available_at, id)
    WHERE status = 'pending' AND scheduled;
