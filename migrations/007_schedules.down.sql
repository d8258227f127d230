DROP INDEX IF EXISTS worker_tasks_schedule_once;
DROP INDEX IF EXISTS worker_tasks_schedule;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS schedule_run, DROP COLUMN IF EXISTS schedule_id;
DROP TABLE IF EXISTS schedule_firings;
DROP TABLE IF EXISTS schedules;
