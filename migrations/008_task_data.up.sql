-- Task data (issue 14): the index of the objects workers uploaded, one row per
-- (task, data type, filename), folded from task.data_uploaded (insert, or
-- replace in place keeping the id) and task.data_deleted (delete). The objects
-- themselves live in the blob store under key. Rebuilt and verified by replay.
CREATE TABLE task_data (
    id           uuid PRIMARY KEY,
    task_id      uuid NOT NULL,
    data_type    text NOT NULL,
    filename     text NOT NULL,
    key          text NOT NULL,
    size_bytes   bigint NOT NULL,
    sha256       text NOT NULL,
    content_type text NOT NULL,
    uploaded_by  uuid NOT NULL,
    uploaded_at  timestamptz NOT NULL,
    uploads      int NOT NULL,
    version      int NOT NULL
);
CREATE UNIQUE INDEX task_data_name ON task_data (task_id, data_type, filename);
-- The orphan sweep asks "is this key indexed?" for every object it lists.
CREATE INDEX task_data_key ON task_data (key);
