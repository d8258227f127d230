-- Reactor checkpoints (DESIGN §5): one row per named reactor, locked FOR UPDATE
-- SKIP LOCKED by the instance running a batch; the batch's effects and the new
-- position commit together. types records which event types the reactor
-- reads, so lag can be measured by anyone (admin stats) without the code.
-- lease_holder / lease_until mark a reactor whose next batch is being
-- prepared outside any transaction (the retry reactor's Claude call): other
-- instances leave it alone until the lease ends.
CREATE TABLE reactor_checkpoints (
    name         text PRIMARY KEY,
    tx_id        xid8        NOT NULL DEFAULT '0',
    seq          bigint      NOT NULL DEFAULT 0,
    types        text[]      NOT NULL DEFAULT '{}',
    lease_holder text,
    lease_until  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Leases: one instance at a time does a periodic job (the stuck detector).
-- The holder renews before expires_at; when it dies another takes over.
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Stuck detection scans tasks in progress by start time.
CREATE INDEX worker_tasks_in_progress ON worker_tasks (started_at) WHERE status = 'in_progress';
-- Admin stats: failed tasks by retry outcome.
CREATE INDEX worker_tasks_failed ON worker_tasks (retry_outcome) WHERE status = 'failed';
