DROP TABLE IF EXISTS pending_counts;
