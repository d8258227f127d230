DROP TABLE IF EXISTS telegram_updates;
DROP INDEX IF EXISTS task_types_alias;
ALTER TABLE task_types DROP COLUMN IF EXISTS params_template, DROP COLUMN IF EXISTS alias;
