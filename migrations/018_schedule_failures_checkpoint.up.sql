-- The schedule_failures reactor (ADR 013) was not wired into the binary
-- before this release, so its checkpoint may be missing. It starts where the
-- retry reactor is rather than at the start of the log: the failures before
-- were decided long ago, and reading them now would pause schedules, and
-- announce it, for history. The next failed execution of a schedule counts
-- its whole streak since the last resume anyway.
INSERT INTO reactor_checkpoints (name, tx_id, seq, types)
SELECT 'schedule_failures', tx_id, seq, ARRAY['task.retries_exhausted', 'task.retry_skipped']
  FROM reactor_checkpoints WHERE name = 'retry'
ON CONFLICT (name) DO NOTHING;
