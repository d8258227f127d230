DROP INDEX IF EXISTS worker_tasks_assignee;
CREATE INDEX IF NOT EXISTS worker_tasks_assignee ON worker_tasks (assigned_to, created_at DESC, id DESC)
    WHERE assigned_to IS NOT NULL;
DROP INDEX IF EXISTS worker_tasks_status;
CREATE INDEX IF NOT EXISTS worker_tasks_status ON worker_tasks (status, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS worker_tasks_in_progress ON worker_tasks (started_at) WHERE status = 'in_progress';
DROP INDEX IF EXISTS worker_tasks_held;
