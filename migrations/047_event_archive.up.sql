-- The event log's archive and compaction (issue 28, ADR 035).
--
-- One row per archived period: the object in the task-data store that holds
-- the period's events as gzipped JSON lines, and what its manifest says. The
-- archive read the period's events with seq in [seq_lo, seq_hi] as of
-- snapshot: an event is in the object exactly when its occurred_at falls in
-- the period, its seq in that range and its tx_id is visible in snapshot;
-- compaction deletes only such events, of archives whose object was read
-- back and checked (verified_at).
CREATE TABLE event_archives (
    period       text        NOT NULL CHECK (period IN ('day', 'week')),
    period_start date        NOT NULL,
    object_key   text        NOT NULL,
    events       bigint      NOT NULL,
    bytes        bigint      NOT NULL,
    sha256       text        NOT NULL,
    seq_lo       bigint      NOT NULL,
    seq_hi       bigint      NOT NULL,
    snapshot     pg_snapshot NOT NULL,
    archived_at  timestamptz NOT NULL,
    verified_at  timestamptz,
    PRIMARY KEY (period, period_start)
);

-- Where compaction is: a sweep visits retry chains by their first task's
-- (created_at, id), in the task listing's index order, from resume_at/id to
-- the retention's start; left_at/id is the first chain this sweep had to
-- leave (still open, or not archived yet), where the next sweep starts.
CREATE TABLE event_compaction (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    resume_at   timestamptz NOT NULL DEFAULT '1970-01-01T00:00:00Z',
    resume_id   uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    left_at     timestamptz,
    left_id     uuid,
    tasks       bigint      NOT NULL DEFAULT 0,
    events      bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz
);
INSERT INTO event_compaction DEFAULT VALUES;
