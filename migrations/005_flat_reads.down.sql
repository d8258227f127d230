DROP TRIGGER IF EXISTS task_counts_insert ON worker_tasks;
DROP TRIGGER IF EXISTS task_counts_update ON worker_tasks;
DROP TRIGGER IF EXISTS task_counts_delete ON worker_tasks;
DROP TRIGGER IF EXISTS task_counts_truncate ON worker_tasks;
DROP FUNCTION IF EXISTS task_counts_apply();
DROP TABLE IF EXISTS task_counts;
DROP INDEX IF EXISTS worker_tasks_completed;
DROP INDEX IF EXISTS worker_tasks_assignee;
