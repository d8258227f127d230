-- Title search off the hot table (issue 16). Every status change is a
-- non-HOT update of worker_tasks and so inserts into each of its indexes,
-- the title's GIN trigram index included, although no status change touches
-- the title. Titles get a table of their own, written only when a task is
-- created or its title edited (projections/task_titles.go); the search reads
-- it. No foreign key: replay swaps tables, and a key would pin the old one.
CREATE TABLE IF NOT EXISTS task_titles (
    id    uuid PRIMARY KEY,
    title text NOT NULL
);

INSERT INTO task_titles (id, title)
SELECT id, title FROM worker_tasks
ON CONFLICT (id) DO NOTHING;

-- Built after the backfill: one bulk build, not a million pending-list inserts.
CREATE INDEX IF NOT EXISTS task_titles_title_trgm ON task_titles USING gin (title gin_trgm_ops);

DROP INDEX IF EXISTS worker_tasks_title_trgm;

ANALYZE task_titles;
