-- Schedules (issue 13, ADR 013): recurring work that creates tasks on its own.
-- The schedules row is the fold of its stream; spec holds the template and
-- the timing as the events carry them.
CREATE TABLE schedules (
    id                        uuid PRIMARY KEY,
    name                      text        NOT NULL,
    state                     text        NOT NULL CHECK (state IN ('active', 'paused', 'cancelled', 'finished')),
    task_type_id              uuid        NOT NULL,
    spec                      jsonb       NOT NULL,
    anchor                    timestamptz NOT NULL,
    next_due_at               timestamptz,
    runs                      int         NOT NULL DEFAULT 0,
    regular_runs              int         NOT NULL DEFAULT 0,
    skips                     int         NOT NULL DEFAULT 0,
    fire_failures             int         NOT NULL DEFAULT 0,
    consecutive_fire_failures int         NOT NULL DEFAULT 0,
    last_due_at               timestamptz,
    last_fired_at             timestamptz,
    resumed_after_run         int         NOT NULL DEFAULT 0,
    paused_reason             text        NOT NULL DEFAULT '',
    auto_paused               boolean     NOT NULL DEFAULT false,
    created_by                uuid,
    created_at                timestamptz NOT NULL,
    updated_at                timestamptz NOT NULL,
    version                   int         NOT NULL
);
-- The scheduler's one question: what is due first (and what is due now,
-- locked FOR UPDATE SKIP LOCKED).
CREATE INDEX schedules_due ON schedules (next_due_at) WHERE state = 'active';
CREATE INDEX schedules_listing ON schedules (created_at DESC, id DESC);

-- One row per firing outcome (schedule.fired, skipped, fire_failed). The
-- unique index is the database's promise that a due time is handled once,
-- whatever crashes or how many instances run: a second firing of the same
-- (schedule, due time) fails and rolls its transaction back, task included.
-- Manual runs ('run') are due when asked for and are not part of it.
CREATE TABLE schedule_firings (
    schedule_id uuid        NOT NULL,
    version     int         NOT NULL, -- the schedule stream version of the event
    kind        text        NOT NULL CHECK (kind IN ('fired', 'run', 'skipped', 'failed')),
    due_at      timestamptz NOT NULL,
    at          timestamptz NOT NULL,
    run         int,
    task_id     uuid,
    missed      int         NOT NULL DEFAULT 0,
    reason      text        NOT NULL DEFAULT '',
    PRIMARY KEY (schedule_id, version)
);
CREATE UNIQUE INDEX schedule_firings_once ON schedule_firings (schedule_id, due_at) WHERE kind <> 'run';
-- Fired, skipped and failed in the last 24 hours; the firing delay.
CREATE INDEX schedule_firings_at ON schedule_firings (at);

-- Tasks created by a firing, and their retries, carry the schedule and the
-- execution number; an execution is one firing's retry chain.
ALTER TABLE worker_tasks ADD COLUMN schedule_id uuid, ADD COLUMN schedule_run int;
CREATE INDEX worker_tasks_schedule ON worker_tasks (schedule_id, schedule_run) WHERE schedule_id IS NOT NULL;
-- One original task per execution.
CREATE UNIQUE INDEX worker_tasks_schedule_once ON worker_tasks (schedule_id, schedule_run)
    WHERE schedule_id IS NOT NULL AND parent_task_id IS NULL;
