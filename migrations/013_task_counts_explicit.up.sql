-- task_counts is kept by the statements that write worker_tasks, no longer
-- by triggers (issue 16, ADR 010): the projector adds each task's change
-- computed in Go, the batched claim and completion add their statement's
-- change in a CTE. The transition tables, the plpgsql call and its
-- aggregate cost every status change about a quarter of its PostgreSQL CPU.
-- The rows stay: they are exact now, and the writers go on from them.
DROP TRIGGER IF EXISTS task_counts_insert ON worker_tasks;
DROP TRIGGER IF EXISTS task_counts_update ON worker_tasks;
DROP TRIGGER IF EXISTS task_counts_delete ON worker_tasks;
DROP TRIGGER IF EXISTS task_counts_truncate ON worker_tasks;
DROP FUNCTION IF EXISTS task_counts_apply();
