DROP TABLE IF EXISTS task_assignments;
DROP TABLE IF EXISTS worker_task_updates;
DROP TABLE IF EXISTS worker_tasks;
DROP TABLE IF EXISTS task_types;
DROP TABLE IF EXISTS user_credentials;
DROP TABLE IF EXISTS users;
DROP TABLE IF EXISTS task_events;
