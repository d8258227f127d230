DROP TABLE IF EXISTS task_minutes;
