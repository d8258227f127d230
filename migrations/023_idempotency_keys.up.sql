-- Idempotency-Key (ADR 018): the first answer to a creating request, by who
-- sent it and the key they chose, written in the transaction that created
-- the thing. A request with a known key (within 24 hours) is answered from
-- here and does nothing again. Not a projection: requests, not events.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    principal    uuid        NOT NULL,
    key          text        NOT NULL,
    request_hash bytea       NOT NULL,
    status       int         NOT NULL,
    response     bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (principal, key)
);
-- The prune deletes the rows older than a day, oldest first.
CREATE INDEX IF NOT EXISTS idempotency_keys_created ON idempotency_keys (created_at);
