DROP INDEX IF EXISTS worker_tasks_finished;
DROP INDEX IF EXISTS worker_tasks_title_trgm;
-- pg_trgm stays: other objects may use it, and it costs nothing unused.
