-- The dashboard's queue by priority and type (ADR 009): an index-only scan of
-- the queue's entries, never of the task rows, so it costs what the queue
-- holds and nothing of history.
CREATE INDEX IF NOT EXISTS worker_tasks_queue_kinds ON worker_tasks (priority_rank, priority, task_type_id)
    WHERE status = 'pending' AND assigned_to IS NULL;
