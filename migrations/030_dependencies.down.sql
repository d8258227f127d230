DROP TABLE IF EXISTS workflows;
ALTER TABLE task_counts DROP COLUMN IF EXISTS blocked;
DROP TABLE IF EXISTS task_dependencies;
DROP INDEX IF EXISTS worker_tasks_workflow;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS deps_left;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS ref;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS workflow_id;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS on_dependency_failure;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS depends_on;
ALTER TABLE worker_tasks DROP CONSTRAINT IF EXISTS worker_tasks_status_check;
ALTER TABLE worker_tasks ADD CONSTRAINT worker_tasks_status_check
    CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled'));
