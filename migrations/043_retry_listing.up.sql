-- The task list's retries filter (retry tasks only, newest or oldest first),
-- read in index order: without it the list walked worker_tasks_listing and
-- skipped every original, so a page cost the history (ADR 010). Retries are
-- a small share of tasks; a page reads its rows only.
CREATE INDEX IF NOT EXISTS worker_tasks_retries ON worker_tasks (created_at DESC, id DESC) WHERE retry_count > 0;
