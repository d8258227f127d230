-- Accounts (issue 11): deactivation, token revocation, lockouts, presence.
-- All of these are folds of user events; replay rebuilds them.
ALTER TABLE users
    ADD COLUMN active        boolean NOT NULL DEFAULT true,
    ADD COLUMN token_epoch   int     NOT NULL DEFAULT 0,
    ADD COLUMN locked_until  timestamptz,
    ADD COLUMN lockouts      int     NOT NULL DEFAULT 0,
    ADD COLUMN offline_since timestamptz;

-- Workers already offline went offline at their last worker.went_offline
-- (an offline worker's last presence event is always that one).
UPDATE users u SET offline_since = (
    SELECT e.occurred_at FROM task_events e
     WHERE e.stream_id = u.id AND e.type = 'worker.went_offline'
     ORDER BY e.version DESC LIMIT 1)
 WHERE NOT u.online;
