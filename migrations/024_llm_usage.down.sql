ALTER TABLE task_types DROP COLUMN IF EXISTS daily_cost_budget_micro_usd;
ALTER TABLE task_types DROP COLUMN IF EXISTS daily_token_budget;
DROP TABLE IF EXISTS llm_usage_worker_days;
DROP TABLE IF EXISTS llm_usage_type_days;
DROP TABLE IF EXISTS llm_usage_chains;
DROP TABLE IF EXISTS llm_usage_tasks;
