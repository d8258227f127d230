-- Per minute: tasks completed, tasks failed, retries created. The
-- dashboard's last hour reads sixty minutes of these, however busy the
-- hour. One row per minute and server process (pid; 0 for rows replay or
-- this backfill writes), so concurrent writers never wait on the current
-- minute's row. The backfill reads the tasks, which say what their events
-- say (a task's completed_at is its task.completed or task.failed time, a
-- retry's created_at its task.created time).
CREATE TABLE task_minutes (
    minute    timestamptz NOT NULL,
    pid       int         NOT NULL DEFAULT 0,
    completed bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    retries   bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, pid)
);

INSERT INTO task_minutes (minute, completed, failed, retries)
SELECT minute, sum(completed), sum(failed), sum(retries) FROM (
    SELECT date_trunc('minute', completed_at) AS minute,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'failed') AS failed, 0 AS retries
      FROM worker_tasks WHERE status IN ('completed', 'failed') GROUP BY 1
    UNION ALL
    SELECT date_trunc('minute', created_at), 0, 0, count(*)
      FROM worker_tasks WHERE retry_count > 0 GROUP BY 1
) x GROUP BY minute;

-- The rows of finished minutes that housekeeping folds into pid 0.
CREATE INDEX task_minutes_unfolded ON task_minutes (minute) WHERE pid <> 0;
