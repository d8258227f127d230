-- LLM usage totals: counters the usage event's own batch adds to (never
-- computed from history), one table per way they are read, each read by
-- its primary key. Rebuilt and verified from task.usage_reported events.
-- Costs are in millionths of a US dollar.
CREATE TABLE IF NOT EXISTS llm_usage_tasks (
    task_id            uuid   PRIMARY KEY,
    reports            bigint NOT NULL DEFAULT 0,
    unpriced_reports   bigint NOT NULL DEFAULT 0,
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    cost_micro_usd     bigint NOT NULL DEFAULT 0
);
-- A retry chain, keyed by its first task.
CREATE TABLE IF NOT EXISTS llm_usage_chains (
    root_task_id       uuid   PRIMARY KEY,
    reports            bigint NOT NULL DEFAULT 0,
    unpriced_reports   bigint NOT NULL DEFAULT 0,
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    cost_micro_usd     bigint NOT NULL DEFAULT 0
);
-- A task type's team day (DIGEST_TZ): what daily budgets count.
CREATE TABLE IF NOT EXISTS llm_usage_type_days (
    task_type_id       uuid   NOT NULL,
    day                date   NOT NULL,
    reports            bigint NOT NULL DEFAULT 0,
    unpriced_reports   bigint NOT NULL DEFAULT 0,
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    cost_micro_usd     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (task_type_id, day)
);
CREATE TABLE IF NOT EXISTS llm_usage_worker_days (
    worker_id          uuid   NOT NULL,
    day                date   NOT NULL,
    reports            bigint NOT NULL DEFAULT 0,
    unpriced_reports   bigint NOT NULL DEFAULT 0,
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    cost_micro_usd     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (worker_id, day)
);
-- Daily budgets of a task type (NULL: none), from its spec.
ALTER TABLE task_types ADD COLUMN IF NOT EXISTS daily_token_budget bigint;
ALTER TABLE task_types ADD COLUMN IF NOT EXISTS daily_cost_budget_micro_usd bigint;
