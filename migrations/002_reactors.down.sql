DROP INDEX IF EXISTS worker_tasks_failed;
DROP INDEX IF EXISTS worker_tasks_in_progress;
DROP TABLE IF EXISTS leases;
DROP TABLE IF EXISTS reactor_checkpoints;
