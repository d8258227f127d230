ALTER TABLE worker_tasks DROP COLUMN IF EXISTS checkpointed_at;
DROP TABLE IF EXISTS task_checkpoints;
