-- The admin UI (ADR 009): an index-backed title search and the dashboard's
-- last-hour figures, each a scan bounded by what it finds, never by history.

-- pg_trgm is a trusted extension (PostgreSQL 13+, in Debian's postgresql-15
-- package): the database owner may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- Title search (ILIKE '%term%') on the tasks page.
CREATE INDEX IF NOT EXISTS worker_tasks_title_trgm ON worker_tasks USING gin (title gin_trgm_ops);

-- Completions and failures per minute over the last hour: a range scan of
-- the finished tasks of that hour.
CREATE INDEX IF NOT EXISTS worker_tasks_finished ON worker_tasks (completed_at) WHERE completed_at IS NOT NULL;
