DROP INDEX IF EXISTS worker_tasks_retries;
