CREATE INDEX IF NOT EXISTS worker_tasks_completed ON worker_tasks (assigned_to, completed_at)
    WHERE status = 'completed';
