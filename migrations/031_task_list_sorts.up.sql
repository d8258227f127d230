-- The task list's orders by start and by run time (store/task_sort.go),
-- read in index order so a page costs the same on any size of history.
-- Both hold ended tasks only, keyed by status first: a status filter reads
-- one range, the whole list merges one scan per status. A claim writes
-- nothing here (its row is in progress); the tasks in progress come from
-- worker_tasks_held. Each completion adds one entry to each.
CREATE INDEX IF NOT EXISTS worker_tasks_started ON worker_tasks (status, started_at DESC, id DESC)
    WHERE status IN ('completed', 'failed', 'cancelled') AND started_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS worker_tasks_run_time ON worker_tasks (status, (completed_at - started_at) DESC, id DESC)
    WHERE status IN ('completed', 'failed', 'cancelled') AND started_at IS NOT NULL AND completed_at IS NOT NULL;
