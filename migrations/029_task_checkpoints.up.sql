-- Task checkpoints (ADR 026): each task's latest checkpoint, folded from its
-- task.checkpointed events (the latest wins; saves counts them). Rebuilt and
-- verified by replay. worker_tasks.checkpointed_at says a task has one, so a
-- claim reads this table only for a task that has a checkpoint or is a retry.
CREATE TABLE task_checkpoints (
    task_id         uuid PRIMARY KEY,
    state           jsonb NOT NULL,
    size_bytes      int NOT NULL,
    worker_id       uuid NOT NULL,
    checkpointed_at timestamptz NOT NULL,
    saves           int NOT NULL,
    version         int NOT NULL
);
ALTER TABLE worker_tasks ADD COLUMN checkpointed_at timestamptz;
