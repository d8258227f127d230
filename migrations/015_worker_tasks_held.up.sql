-- A worker's tasks in progress (ADR 016): the claim's capacity count, the
-- stuck detector's per-worker reads, a worker's load. It replaces
-- worker_tasks_in_progress (started_at): reads of every task in progress
-- by start time scan this small index whole. A completion writes nothing
-- here: its row leaves the predicate.
CREATE INDEX IF NOT EXISTS worker_tasks_held ON worker_tasks (assigned_to, started_at) WHERE status = 'in_progress';
DROP INDEX IF EXISTS worker_tasks_in_progress;

-- The status list leaves out the tasks in progress, which worker_tasks_held
-- has: a claim then writes nothing here, and the claim's capacity count
-- (status 'in_progress', one worker) has no index to choose but
-- worker_tasks_held. With both, the generic plan of a fresh queue (no task
-- ever in progress when the statistics were taken) counted through this
-- one, reading every task in progress of every worker.
DROP INDEX IF EXISTS worker_tasks_status;
CREATE INDEX IF NOT EXISTS worker_tasks_status ON worker_tasks (status, created_at DESC, id DESC) WHERE status <> 'in_progress';

-- A worker's tasks newest first leave out those in progress too (the lists
-- add them from worker_tasks_held): the capacity count's status is one no
-- other index covers, and a claim writes nothing here. Mid-run statistics
-- made generic plans count through this index, reading the worker's whole
-- history on every claim (taskctl bench: 1.6 million index entries for
-- 20,000 claims).
DROP INDEX IF EXISTS worker_tasks_assignee;
CREATE INDEX IF NOT EXISTS worker_tasks_assignee ON worker_tasks (assigned_to, created_at DESC, id DESC)
    WHERE assigned_to IS NOT NULL AND status <> 'in_progress';
