DROP INDEX IF EXISTS worker_tasks_unique_completed;
DROP INDEX IF EXISTS worker_tasks_unique_active;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS unique_key;
