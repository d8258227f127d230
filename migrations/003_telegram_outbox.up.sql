-- Telegram notifications on their way out (DESIGN §5, docs/adr: telegram outbox).
-- The telegram reactor inserts rows in the same transaction as its checkpoint;
-- UNIQUE (event_seq, kind) makes a replayed batch insert nothing twice. For
-- kind 'task.waiting' event_seq is the task.created/task.released event that
-- queued the task (one notification per stay in the queue).
CREATE SEQUENCE telegram_outbox_batch_seq;

CREATE TABLE telegram_outbox (
    id              bigserial PRIMARY KEY,
    event_seq       bigint      NOT NULL,
    kind            text        NOT NULL,
    chat_id         text        NOT NULL,
    text            text        NOT NULL, -- one line, HTML, user text already escaped
    urgent          boolean     NOT NULL DEFAULT false,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'dead')),
    attempts        int         NOT NULL DEFAULT 0,
    -- When the row may next be claimed: creation, a backoff or retry_after,
    -- or the end of the lease of the sender holding it.
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    last_error      text,       -- Telegram's description or the redacted network error
    batch_id        bigint,     -- the last claim that took the row (rows sent together share it)
    UNIQUE (event_seq, kind)
);

CREATE INDEX telegram_outbox_due ON telegram_outbox (status, next_attempt_at);

-- Enabling Telegram on a database with history must not announce that
-- history: the telegram reactor starts at the log's head (nothing happens on
-- an empty log, where it starts at the beginning anyway).
INSERT INTO reactor_checkpoints (name, tx_id, seq)
SELECT 'telegram', tx_id, seq FROM task_events ORDER BY tx_id DESC, seq DESC LIMIT 1
ON CONFLICT (name) DO NOTHING;
