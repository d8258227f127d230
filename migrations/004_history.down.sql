DROP INDEX IF EXISTS task_events_actor;
DROP INDEX IF EXISTS task_events_worker;
