DROP INDEX IF EXISTS worker_tasks_queue_kinds;
