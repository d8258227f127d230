DROP TABLE IF EXISTS worker_day_completions;
