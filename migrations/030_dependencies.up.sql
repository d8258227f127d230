-- Task dependencies and workflows (DESIGN §13, ADR 025).
--
-- A task created with depends_on whose dependencies are not all done is
-- 'blocked': not pending, so no claim index holds it. The transaction that
-- completes its last dependency sets it pending (task.unblocked).
ALTER TABLE worker_tasks DROP CONSTRAINT IF EXISTS worker_tasks_status_check;
ALTER TABLE worker_tasks ADD CONSTRAINT worker_tasks_status_check
    CHECK (status IN ('blocked', 'pending', 'in_progress', 'completed', 'failed', 'cancelled')) NOT VALID;
ALTER TABLE worker_tasks VALIDATE CONSTRAINT worker_tasks_status_check;

-- Folded from task.created: the dependencies as given, what a failed
-- dependency does to the task ('wait'; NULL cancels it), and the workflow
-- and ref the task was created under (retries carry the last two on).
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS depends_on uuid[];
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS on_dependency_failure text;
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS workflow_id uuid;
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS ref text;
-- Derived, meaningful while blocked: how many dependencies are not done.
-- Every completion decrements it on the row, so two dependencies
-- completing at once never both see the other as open.
ALTER TABLE worker_tasks ADD COLUMN IF NOT EXISTS deps_left int NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS worker_tasks_workflow ON worker_tasks (workflow_id, created_at, id)
    WHERE workflow_id IS NOT NULL;

-- The edges, one row per (task, dependency) as given at creation, read
-- backwards: which tasks wait for this one (or any task of its retry chain).
CREATE TABLE IF NOT EXISTS task_dependencies (
    task_id    uuid NOT NULL,
    depends_on uuid NOT NULL,
    PRIMARY KEY (task_id, depends_on)
);
CREATE INDEX IF NOT EXISTS task_dependencies_dependency ON task_dependencies (depends_on);

ALTER TABLE task_counts ADD COLUMN IF NOT EXISTS blocked bigint NOT NULL DEFAULT 0;

-- A workflow is the fold of its stream: created with its graph, maybe
-- cancelled. Its status and progress are read from its tasks.
CREATE TABLE IF NOT EXISTS workflows (
    id           uuid PRIMARY KEY,
    name         text        NOT NULL,
    task_count   int         NOT NULL,
    created_by   uuid,
    created_at   timestamptz NOT NULL,
    cancelled_at timestamptz,
    updated_at   timestamptz NOT NULL,
    version      int         NOT NULL
);
CREATE INDEX IF NOT EXISTS workflows_listing ON workflows (created_at DESC, id DESC);
