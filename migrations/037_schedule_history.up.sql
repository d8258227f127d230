-- A schedule's stats are counters kept on write, so they survive the
-- pruning of its history and are read without scanning its executions.
-- Like task_counts (ADR 010) there is one row per schedule per server
-- process that wrote to it (pid = pg_backend_pid()), so two transactions
-- never wait for the same row; the stats are the sums, and the pruner folds
-- a schedule's rows into its pid 0 row. An execution counts once its chain
-- ends: completed, failed (retries exhausted or skipped) or cancelled.
CREATE TABLE schedule_counts (
    schedule_id          uuid   NOT NULL,
    pid                  int    NOT NULL,
    completed            bigint NOT NULL DEFAULT 0,
    failed               bigint NOT NULL DEFAULT 0,
    cancelled            bigint NOT NULL DEFAULT 0,
    -- finished executions that started, and the sum of their durations
    -- (first attempt's start to last attempt's end), for the average
    timed                bigint NOT NULL DEFAULT 0,
    seconds              float8 NOT NULL DEFAULT 0,
    -- the latest failed execution this row saw (the highest run)
    last_failure_run     int,
    last_failure_task_id uuid,
    last_failure_reason  text,
    last_failure_at      timestamptz,
    PRIMARY KEY (schedule_id, pid)
);

-- What the pruner kept of a schedule's history: executions numbered from
-- from_run, schedule_firings rows from from_version (the schedule stream
-- version). Not a read model of the log: replay keeps the pruned firings
-- out when it rebuilds or verifies schedule_firings.
CREATE TABLE schedule_history (
    schedule_id  uuid        PRIMARY KEY,
    from_run     int         NOT NULL,
    from_version int         NOT NULL,
    pruned_at    timestamptz NOT NULL
);

-- The counters of the executions recorded so far: the last task of each
-- chain (no retry after it) gives the outcome, the chain's original task
-- the start.
INSERT INTO schedule_counts (schedule_id, pid, completed, failed, cancelled, timed, seconds,
                             last_failure_run, last_failure_task_id, last_failure_reason, last_failure_at)
SELECT schedule_id, 0,
       count(*) FILTER (WHERE outcome = 'completed'),
       count(*) FILTER (WHERE outcome = 'failed'),
       count(*) FILTER (WHERE outcome = 'cancelled'),
       count(*) FILTER (WHERE outcome IS NOT NULL AND started_at IS NOT NULL AND completed_at IS NOT NULL),
       coalesce(sum(extract(epoch FROM completed_at - started_at)::float8)
                FILTER (WHERE outcome IS NOT NULL AND started_at IS NOT NULL AND completed_at IS NOT NULL), 0),
       (array_agg(run ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1],
       (array_agg(id ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1],
       (array_agg(coalesce(failure_reason, '') ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1],
       (array_agg(completed_at ORDER BY run DESC) FILTER (WHERE outcome = 'failed'))[1]
  FROM (SELECT l.schedule_id, l.schedule_run AS run, l.id, l.failure_reason, l.completed_at, o.started_at,
               CASE WHEN l.status = 'completed' THEN 'completed'
                    WHEN l.status = 'cancelled' THEN 'cancelled'
                    WHEN l.status = 'failed' AND l.retry_outcome IN ('skipped', 'exhausted') THEN 'failed'
               END AS outcome
          FROM worker_tasks l
          LEFT JOIN worker_tasks o ON o.schedule_id = l.schedule_id AND o.schedule_run = l.schedule_run
                                  AND o.parent_task_id IS NULL
         WHERE l.schedule_id IS NOT NULL AND l.schedule_run IS NOT NULL AND l.retry_task_id IS NULL) e
 WHERE outcome IS NOT NULL
 GROUP BY schedule_id;
