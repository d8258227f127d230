CREATE INDEX IF NOT EXISTS worker_tasks_title_trgm ON worker_tasks USING gin (title gin_trgm_ops);
DROP TABLE IF EXISTS task_titles;
