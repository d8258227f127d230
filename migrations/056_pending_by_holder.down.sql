DROP INDEX IF EXISTS worker_tasks_waiting_for;
