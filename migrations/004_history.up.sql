-- The worker_id filter of the events API and the live tail (issue 4): the
-- events naming a worker in their data, and the events a user caused. Each
-- index is ordered by position after the id, so a filtered page is two short
-- ordered index scans (plus the user's own stream through its unique index)
-- merged by position, whatever the size of the log: on a 1M-event log a
-- worker with no events after the cursor took 3.4 s scanning by position and
-- takes 1.6 ms with these. Cost: two more index entries per event written
-- (the worker one only for events that name a worker).
-- On a large live log, build them first with CREATE INDEX CONCURRENTLY under
-- the same names; this migration then leaves them as they are.
CREATE INDEX IF NOT EXISTS task_events_worker ON task_events ((data->>'worker_id'), tx_id, seq)
    WHERE data ? 'worker_id';
CREATE INDEX IF NOT EXISTS task_events_actor ON task_events ((meta->'actor'->>'id'), tx_id, seq);
