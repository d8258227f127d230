DROP TABLE IF EXISTS schedule_history;
DROP TABLE IF EXISTS schedule_counts;
