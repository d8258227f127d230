DROP INDEX IF EXISTS users_by_name;
