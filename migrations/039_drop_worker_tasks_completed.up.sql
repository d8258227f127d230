-- "Completed today" reads worker_day_completions since migration 036, and
-- nothing else reads a worker's completions by time: the index only cost
-- every completion a write.
DROP INDEX IF EXISTS worker_tasks_completed;
