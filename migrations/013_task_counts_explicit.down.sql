-- The triggers of migration 005, exactly as it made them. The counts are
-- exact when they come back (the writers kept them), so nothing is recounted.

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

CREATE TRIGGER task_counts_insert AFTER INSERT ON worker_tasks
    REFERENCING NEW TABLE AS task_counts_new FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
CREATE TRIGGER task_counts_update AFTER UPDATE ON worker_tasks
    REFERENCING OLD TABLE AS task_counts_old NEW TABLE AS task_counts_new FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
CREATE TRIGGER task_counts_delete AFTER DELETE ON worker_tasks
    REFERENCING OLD TABLE AS task_counts_old FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
CREATE TRIGGER task_counts_truncate AFTER TRUNCATE ON worker_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_apply();
