-- The open backlog by priority, type and state: pending tasks claimable by
-- time (ready), waiting for their run_at (scheduled), and blocked tasks
-- waiting for their dependencies; each split by whether a worker was
-- assigned. The dashboard's queue and the monitor's queue depth read it
-- instead of counting the backlog. A paused or limited type's tasks are
-- ready here: the gate is the type's (every open task copies it), so a
-- read splits them by joining task_types and a pause writes nothing here.
-- One row set per server process (pid; 0 for rows replay, this backfill
-- and the compaction write), so concurrent writers never wait on a
-- counter row (ADR 031).
CREATE TABLE pending_counts (
    pid          int     NOT NULL DEFAULT 0,
    task_type_id uuid    NOT NULL,
    priority     text    NOT NULL,
    state        text    NOT NULL CHECK (state IN ('ready', 'scheduled', 'blocked')),
    assigned     boolean NOT NULL,
    tasks        bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (pid, task_type_id, priority, state, assigned)
);

-- Writers of this release keep the counter from the moment it exists;
-- the lock keeps one of the release before from changing the backlog
-- between the count and the commit.
LOCK TABLE worker_tasks IN SHARE MODE;

INSERT INTO pending_counts (task_type_id, priority, state, assigned, tasks)
SELECT task_type_id, priority,
       CASE WHEN status = 'blocked' THEN 'blocked' WHEN scheduled THEN 'scheduled' ELSE 'ready' END,
       assigned_to IS NOT NULL, count(*)
  FROM worker_tasks
 WHERE status IN ('pending', 'blocked')
 GROUP BY 1, 2, 3, 4;
