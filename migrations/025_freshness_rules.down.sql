DROP TABLE IF EXISTS freshness_keys;
DROP TABLE IF EXISTS freshness_rules;
