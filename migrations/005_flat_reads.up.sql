-- Reads that stay flat as history grows (issue 10, ADR 010).

-- "Completed today" per worker: a range scan of one worker's completions
-- since midnight, instead of every task the worker ever completed.
CREATE INDEX IF NOT EXISTS worker_tasks_completed ON worker_tasks (assigned_to, completed_at)
    WHERE status = 'completed';

-- A worker's tasks newest first (the task list filtered by worker, a worker's
-- own list with all=true): a walk of this index from the top, instead of a
-- sort of every task the worker ever held.
CREATE INDEX IF NOT EXISTS worker_tasks_assignee ON worker_tasks (assigned_to, created_at DESC, id DESC)
    WHERE assigned_to IS NOT NULL;

-- Task counts kept by the transactions that change worker_tasks: one row per
-- server process (pg_backend_pid()), so two transactions never wait for the
-- same counter row, and a total is a sum() over a handful of rows. Rows of
-- processes that have ended are folded into pid 0 (store.CompactTaskCounts).
-- A projection of worker_tasks: `taskctl replay` rebuilds it and
-- `taskctl replay --verify` checks it against the fold of the events.
CREATE TABLE task_counts (
    pid               int    PRIMARY KEY,
    pending           bigint NOT NULL DEFAULT 0,
    queued            bigint NOT NULL DEFAULT 0, -- pending and unassigned: the queue depth
    in_progress       bigint NOT NULL DEFAULT 0,
    completed         bigint NOT NULL DEFAULT 0,
    failed            bigint NOT NULL DEFAULT 0,
    cancelled         bigint NOT NULL DEFAULT 0,
    awaiting_retry    bigint NOT NULL DEFAULT 0, -- failed, and the retry reactor has not decided
    retries_exhausted bigint NOT NULL DEFAULT 0,
    retries_skipped   bigint NOT NULL DEFAULT 0
);

-- A statement's net change of every counter, added to this process's row.
-- Statement-level, with transition tables: a batch of 500 claims is one
-- upsert, not 500; a statement that changes no counter writes nothing.
CREATE FUNCTION task_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d bigint[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM task_counts;
        RETURN NULL;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT ARRAY[coalesce(sum(s * (status = 'pending')::int), 0),
                   coalesce(sum(s * (status = 'pending' AND assigned_to IS NULL)::int), 0),
                   coalesce(sum(s * (status = 'in_progress')::int), 0),
                   coalesce(sum(s * (status = 'completed')::int), 0),
                   coalesce(sum(s * (status = 'failed')::int), 0),
                   coalesce(sum(s * (status = 'cancelled')::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome IS NULL)::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome = 'exhausted')::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome = 'skipped')::int), 0)]
              INTO d FROM (SELECT 1 AS s, status, assigned_to, retry_outcome FROM task_counts_new) x;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT ARRAY[coalesce(sum(s * (status = 'pending')::int), 0),
                   coalesce(sum(s * (status = 'pending' AND assigned_to IS NULL)::int), 0),
                   coalesce(sum(s * (status = 'in_progress')::int), 0),
                   coalesce(sum(s * (status = 'completed')::int), 0),
                   coalesce(sum(s * (status = 'failed')::int), 0),
                   coalesce(sum(s * (status = 'cancelled')::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome IS NULL)::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome = 'exhausted')::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome = 'skipped')::int), 0)]
              INTO d FROM (SELECT 1 AS s, status, assigned_to, retry_outcome FROM task_counts_new UNION ALL SELECT -1 AS s, status, assigned_to, retry_outcome FROM task_counts_old) x;
    ELSE
        SELECT ARRAY[coalesce(sum(s * (status = 'pending')::int), 0),
                   coalesce(sum(s * (status = 'pending' AND assigned_to IS NULL)::int), 0),
                   coalesce(sum(s * (status = 'in_progress')::int), 0),
                   coalesce(sum(s * (status = 'completed')::int), 0),
                   coalesce(sum(s * (status = 'failed')::int), 0),
                   coalesce(sum(s * (status = 'cancelled')::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome IS NULL)::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome = 'exhausted')::int), 0),
                   coalesce(sum(s * (status = 'failed' AND retry_outcome = 'skipped')::int), 0)]
              INTO d FROM (SELECT -1 AS s, status, assigned_to, retry_outcome FROM task_counts_old) x;
    END IF;
    IF d = '{0,0,0,0,0,0,0,0,0}'::bigint[] THEN
        RETURN NULL;
    END IF;
    INSERT INTO task_counts AS c VALUES (pg_backend_pid(), d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9])
    ON CONFLICT (pid) DO UPDATE SET pending = c.pending + excluded.pending, queued = c.queued + excluded.queued,
        in_progress = c.in_progress + excluded.in_progress, completed = c.completed + excluded.completed,
        failed = c.failed + excluded.failed, cancelled = c.cancelled + excluded.cancelled,
        awaiting_retry = c.awaiting_retry + excluded.awaiting_retry,
        retries_exhausted = c.retries_exhausted + excluded.retries_exhausted,
        retries_skipped = c.retries_skipped + excluded.retries_skipped;
    RETURN NULL;
END $$;

-- Count what is there and start counting, with writers held off in between.
LOCK TABLE worker_tasks IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO task_counts
SELECT 0, count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'pending' AND assigned_to IS NULL),
       count(*) FILTER (WHERE status = 'in_progress'), count(*) FILTER (WHERE status = 'completed'),
       count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'cancelled'),
       count(*) FILTER (WHERE status = 'failed' AND retry_outcome IS NULL),
       count(*) FILTER (WHERE status = 'failed' AND retry_outcome = 'exhausted'),
       count(*) FILTER (WHERE status = 'failed' AND retry_outcome = 'skipped')
  FROM worker_tasks;
CREATE TRIGGER task_counts_insert AFTER INSERT ON worker_tasks
    REFERENCING NEW TABLE AS task_counts_new FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
CREATE TRIGGER task_counts_update AFTER UPDATE ON worker_tasks
    REFERENCING OLD TABLE AS task_counts_old NEW TABLE AS task_counts_new FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
CREATE TRIGGER task_counts_delete AFTER DELETE ON worker_tasks
    REFERENCING OLD TABLE AS task_counts_old FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
CREATE TRIGGER task_counts_truncate AFTER TRUNCATE ON worker_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
