DROP INDEX IF EXISTS worker_tasks_scheduled;
DROP INDEX IF EXISTS worker_tasks_queue;
CREATE INDEX worker_tasks_queue ON worker_tasks (priority_rank, created_at, id)
    WHERE status = 'pending' AND assigned_to IS NULL;
DROP INDEX IF EXISTS worker_tasks_preassigned;
CREATE INDEX worker_tasks_preassigned ON worker_tasks (assigned_to, priority_rank, created_at, id)
    WHERE status = 'pending' AND assigned_to IS NOT NULL;
-- queued counted the scheduled unassigned tasks before.
INSERT INTO task_counts AS c (pid, queued)
SELECT 0, count(*) FROM worker_tasks WHERE status = 'pending' AND scheduled AND assigned_to IS NULL
ON CONFLICT (pid) DO UPDATE SET queued = c.queued + excluded.queued;
ALTER TABLE task_counts DROP COLUMN IF EXISTS scheduled;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS gated;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS scheduled;
