-- The admin UI's worker picker (issue 24): above a couple of hundred
-- workers it suggests those whose name or email starts with what was typed.
-- A prefix is a range in byte order (COLLATE "C", whatever the database's
-- collation), names compared lower-cased; only workers are indexed.
CREATE INDEX users_workers_by_name_prefix ON users (lower(full_name) COLLATE "C", id) WHERE is_worker;
CREATE INDEX users_workers_by_email_prefix ON users (email COLLATE "C") WHERE is_worker;
