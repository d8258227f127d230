-- Telegram commands (ADR 022).
--
-- A task type's alias (the short name people type: /add reddit NVDA) and
-- params template (the params a key fills in), folded from
-- task_type.created / updated. An alias names one type.
ALTER TABLE task_types
    ADD COLUMN IF NOT EXISTS alias text,
    ADD COLUMN IF NOT EXISTS params_template text; -- as written: JSON text with {{name}} placeholders
CREATE UNIQUE INDEX IF NOT EXISTS task_types_alias ON task_types (alias) WHERE alias IS NOT NULL;

-- The Telegram updates already handled: a command Telegram delivers twice
-- (a webhook retried, getUpdates read again after a takeover) finds its
-- update_id here and runs once. Written in the transaction of the
-- command's effect and its reply. Not a projection: replay leaves it alone.
CREATE TABLE IF NOT EXISTS telegram_updates (
    update_id   bigint PRIMARY KEY,
    chat_id     bigint,
    user_id     bigint,
    command     text        NOT NULL DEFAULT '',
    outcome     text        NOT NULL,
    received_at timestamptz NOT NULL
);
-- A chat that is refused hears it once an hour (RecentlyRefused).
CREATE INDEX IF NOT EXISTS telegram_updates_refused ON telegram_updates (chat_id, received_at) WHERE outcome = 'refused';
