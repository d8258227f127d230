DROP INDEX IF EXISTS worker_tasks_run_time;
DROP INDEX IF EXISTS worker_tasks_started;
