-- The event log: append-only, the source of truth (DESIGN §2).
CREATE TABLE task_events (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    stream_type    text        NOT NULL,
    stream_id      uuid        NOT NULL,
    version        int         NOT NULL CHECK (version > 0),
    type           text        NOT NULL,
    schema_version int         NOT NULL DEFAULT 1,
    data           jsonb       NOT NULL,
    meta           jsonb       NOT NULL,
    occurred_at    timestamptz NOT NULL,
    UNIQUE (stream_id, version)
);
-- Consumers read in (tx_id, seq) order below the snapshot horizon.
CREATE INDEX task_events_position ON task_events (tx_id, seq);
CREATE INDEX task_events_type ON task_events (type, tx_id, seq);

-- Projections: every column below is the fold of events, except where noted.
-- No foreign keys between projections: the command layer checks references,
-- and replay rebuilds tables in any order (DESIGN §6).
CREATE TABLE users (
    id                   uuid PRIMARY KEY,
    email                text        NOT NULL UNIQUE,
    full_name            text        NOT NULL,
    is_admin             boolean     NOT NULL DEFAULT false,
    is_worker            boolean     NOT NULL DEFAULT false,
    max_concurrent_tasks int         NOT NULL DEFAULT 1,
    online               boolean     NOT NULL DEFAULT false,
    created_at           timestamptz NOT NULL,
    version              int         NOT NULL,
    -- Heartbeat state: frequent and not events (DESIGN §3), so not rebuilt by replay.
    last_activity_at     timestamptz,
    heartbeat_status     text,
    current_task_id      uuid,
    heartbeat_metadata   jsonb
);

-- Secrets never enter the event log (ADR 002); written in the same
-- transaction as user.registered.
CREATE TABLE user_credentials (
    user_id       uuid PRIMARY KEY,
    password_hash text NOT NULL
);

CREATE TABLE task_types (
    id                    uuid PRIMARY KEY,
    name                  text        NOT NULL UNIQUE,
    label                 text        NOT NULL,
    description           text        NOT NULL DEFAULT '',
    sop                   text        NOT NULL DEFAULT '',
    param_schema          jsonb       NOT NULL DEFAULT '{"type":"object"}',
    max_retries           int         NOT NULL DEFAULT 3,
    timeout_seconds       int         NOT NULL DEFAULT 0,
    retry_backoff_seconds int         NOT NULL DEFAULT 0,
    archived              boolean     NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    version               int         NOT NULL
);

CREATE TABLE worker_tasks (
    id             uuid PRIMARY KEY,
    title          text        NOT NULL,
    description    text        NOT NULL DEFAULT '',
    task_type_id   uuid        NOT NULL,
    params         jsonb       NOT NULL DEFAULT '{}',
    priority       text        NOT NULL CHECK (priority IN ('urgent', 'high', 'medium', 'low')),
    priority_rank  smallint    GENERATED ALWAYS AS (
        CASE priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END) STORED,
    status         text        NOT NULL CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled')),
    assigned_to    uuid,
    result         jsonb,
    retry_count    int         NOT NULL DEFAULT 0,
    parent_task_id uuid,
    created_by     uuid,
    created_at     timestamptz NOT NULL,
    started_at     timestamptz,
    completed_at   timestamptz,
    updated_at     timestamptz NOT NULL,
    available_at   timestamptz NOT NULL,
    failure_kind   text,
    failure_reason text,
    retry_outcome  text,
    retry_task_id  uuid,
    version        int         NOT NULL
);

-- The claim: two index scans in queue order, one per branch of the claim query.
CREATE INDEX worker_tasks_queue ON worker_tasks (priority_rank, created_at, id)
    WHERE status = 'pending' AND assigned_to IS NULL;
CREATE INDEX worker_tasks_preassigned ON worker_tasks (assigned_to, priority_rank, created_at, id)
    WHERE status = 'pending' AND assigned_to IS NOT NULL;
-- A worker's held tasks (capacity check, "my tasks", stuck detection).
CREATE INDEX worker_tasks_holder ON worker_tasks (assigned_to, status) WHERE assigned_to IS NOT NULL;
-- Admin listing: newest first, keyset on (created_at, id), filtered by status.
CREATE INDEX worker_tasks_listing ON worker_tasks (created_at DESC, id DESC);
CREATE INDEX worker_tasks_status ON worker_tasks (status, created_at DESC, id DESC);
-- One retry per failed task: the backstop against double retries.
CREATE UNIQUE INDEX worker_tasks_one_retry ON worker_tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;

CREATE TABLE worker_task_updates (
    id         uuid PRIMARY KEY,
    task_id    uuid        NOT NULL,
    author_id  uuid,
    message    text        NOT NULL,
    created_at timestamptz NOT NULL,
    version    int         NOT NULL -- the task stream version of task.update_posted
);
CREATE INDEX worker_task_updates_task ON worker_task_updates (task_id, created_at, id);

-- Who held or was given a task, by whom, why, when: admin assignments and claims.
CREATE TABLE task_assignments (
    task_id     uuid        NOT NULL,
    version     int         NOT NULL, -- the task stream version of the event
    worker_id   uuid        NOT NULL,
    assigned_by uuid,
    kind        text        NOT NULL CHECK (kind IN ('assigned', 'claimed', 'released')),
    reason      text        NOT NULL DEFAULT '',
    at          timestamptz NOT NULL,
    PRIMARY KEY (task_id, version)
);
