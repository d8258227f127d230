DROP INDEX IF EXISTS worker_tasks_unique_ended;
DROP TABLE IF EXISTS freshness_keys;
DROP TABLE IF EXISTS freshness_rules;
