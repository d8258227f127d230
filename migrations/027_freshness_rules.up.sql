-- Freshness rules (ADR 023): a watchlist of keys per task type; a task is
-- created for a key when its newest completed task is older than the rule's
-- max age and none is pending or in progress. The freshness_rules row is
-- the fold of its stream.
CREATE TABLE freshness_rules (
    id              uuid PRIMARY KEY,
    name            text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('active', 'paused')),
    task_type_id    uuid        NOT NULL,
    max_age_seconds bigint      NOT NULL CHECK (max_age_seconds > 0),
    spec            jsonb       NOT NULL,
    key_count       int         NOT NULL,
    tasks_created   bigint      NOT NULL DEFAULT 0,
    paused_reason   text        NOT NULL DEFAULT '',
    created_by      uuid,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    version         int         NOT NULL
);
CREATE INDEX freshness_rules_listing ON freshness_rules (created_at DESC, id DESC);

-- One row per watched key. weight, rising and added_at come from the
-- rule's stream; last_completed_at, last_failed_at (a task that ended
-- failed or cancelled), current_task_id and due_at are kept from the tasks
-- whose unique_key is the key's (task creation and end write them in the
-- same transaction), so the scheduler reads only the keys that are due:
-- due_at is NULL while a task is pending or in progress or the rule is
-- paused, otherwise the max age after the last task ended.
CREATE TABLE freshness_keys (
    rule_id           uuid        NOT NULL,
    key               text        NOT NULL,
    unique_key        text        NOT NULL,
    task_type_id      uuid        NOT NULL,
    weight            int         NOT NULL,
    rising            boolean     NOT NULL DEFAULT false,
    added_at          timestamptz NOT NULL,
    last_completed_at timestamptz,
    last_failed_at    timestamptz,
    current_task_id   uuid,
    due_at            timestamptz,
    PRIMARY KEY (rule_id, key)
);
CREATE UNIQUE INDEX freshness_keys_unique ON freshness_keys (unique_key, task_type_id);
-- The scheduler's questions: which rules have keys due now; a rule's due keys.
CREATE INDEX freshness_keys_due ON freshness_keys (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX freshness_keys_rule_due ON freshness_keys (rule_id, due_at) WHERE due_at IS NOT NULL;

-- A key's last failed or cancelled task, for replay to derive the key's
-- state from (only tasks with a unique key that did not complete).
CREATE INDEX IF NOT EXISTS worker_tasks_unique_ended ON worker_tasks (task_type_id, unique_key, completed_at DESC)
    WHERE unique_key IS NOT NULL AND status IN ('failed', 'cancelled');
