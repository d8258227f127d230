DROP INDEX IF EXISTS task_events_gated_claims;
DROP INDEX IF EXISTS task_types_limited;
DROP INDEX IF EXISTS worker_tasks_gated_running;
DROP INDEX IF EXISTS worker_tasks_gated_assigned;
DROP INDEX IF EXISTS worker_tasks_gated;
UPDATE worker_tasks SET gated = false WHERE gated;
ALTER TABLE worker_tasks DROP COLUMN IF EXISTS concurrency_key;
ALTER TABLE task_types DROP COLUMN IF EXISTS key_cursor, DROP COLUMN IF EXISTS gated,
    DROP COLUMN IF EXISTS max_in_progress_per_key, DROP COLUMN IF EXISTS concurrency_key_path,
    DROP COLUMN IF EXISTS concurrency_key, DROP COLUMN IF EXISTS rate_limit_seconds,
    DROP COLUMN IF EXISTS rate_limit_count, DROP COLUMN IF EXISTS max_in_progress,
    DROP COLUMN IF EXISTS paused_at, DROP COLUMN IF EXISTS paused_by,
    DROP COLUMN IF EXISTS pause_reason, DROP COLUMN IF EXISTS paused;
