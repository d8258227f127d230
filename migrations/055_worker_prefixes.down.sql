DROP INDEX IF EXISTS users_workers_by_email_prefix;
DROP INDEX IF EXISTS users_workers_by_name_prefix;
