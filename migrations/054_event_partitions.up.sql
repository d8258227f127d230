-- The event log partitioned by time (issue 28, ADR 034): task_events becomes a
-- table partitioned by RANGE (occurred_at), so periods past retention can be
-- dropped whole. The existing log is not copied: the old table becomes the
-- first partition, covering from its first event's UTC day to the day after
-- its last one (or today's), named task_events_dYYYYMMDD_to_dYYYYMMDD (upper
-- bound excluded). Later periods (day or week, EVENT_PARTITION) are created
-- ahead by the service's maintenance; an event whose period has no partition
-- yet lands in task_events_default, which the maintenance drains.
--
-- A partitioned table's unique keys must hold the partition key, so
-- UNIQUE (stream_id, version) cannot stay the optimistic-concurrency guard.
-- Two guards replace it, both failing a lost race as the key did (23505,
-- constraint event_streams_version), both meeting the two writers on one
-- row, where the second waits for the first and then fails:
-- - a task's stream (the hot path): its worker_tasks row, which every
--   writer of a task updates with the events; a writer that did not lock
--   it first writes it only if it still holds the version it folded from
--   (projections' guarded upsert), else calls task_stream_lost_race();
-- - every other stream (accounts, types, schedules...: few writes):
--   event_streams holds its head version, and a statement trigger moves it
--   with every insert: the stream's new events must continue its head.
--
-- Locks: writers of events wait from the first statement (SHARE ROW
-- EXCLUSIVE: the heads are filled from a log that does not move); readers
-- wait only from the renames on (ACCESS EXCLUSIVE), through the scan that
-- checks the old rows fit the first partition. On a big log, build the two
-- indexes below first, with the service running:
--   CREATE UNIQUE INDEX CONCURRENTLY task_events_054_seq ON task_events (seq, occurred_at);
--   CREATE INDEX CONCURRENTLY task_events_054_stream ON task_events (stream_id, version);
-- and this migration keeps them (docs/deploy.md has its time on 1M tasks).
LOCK TABLE task_events IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE event_streams (
    stream_id uuid PRIMARY KEY,
    version   int  NOT NULL CHECK (version > 0)
) WITH (fillfactor = 50); -- room for HOT updates: the version is not indexed
INSERT INTO event_streams (stream_id, version)
SELECT stream_id, max(version) FROM task_events WHERE stream_type <> 'task' GROUP BY stream_id;

-- The partitioned table's primary key and timeline index, built on the old
-- table so that attaching it adopts them.
CREATE UNIQUE INDEX IF NOT EXISTS task_events_054_seq ON task_events (seq, occurred_at);
CREATE INDEX IF NOT EXISTS task_events_054_stream ON task_events (stream_id, version);

DO $$
DECLARE
    lo       timestamptz;
    hi       timestamptz;
    next_seq bigint;
    old      text;
    idx      text;
BEGIN
    SELECT date_trunc('day', coalesce(min(occurred_at), now()), 'UTC'),
           date_trunc('day', greatest(max(occurred_at), now()), 'UTC') + interval '1 day'
      INTO lo, hi FROM task_events;
    next_seq := coalesce(pg_sequence_last_value(pg_get_serial_sequence('task_events', 'seq')), 0) + 1;
    old := format('task_events_d%s_to_d%s', to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD'), to_char(hi AT TIME ZONE 'UTC', 'YYYYMMDD'));

    ALTER TABLE task_events DROP CONSTRAINT task_events_pkey;
    ALTER TABLE task_events DROP CONSTRAINT task_events_stream_id_version_key;
    ALTER TABLE task_events ALTER COLUMN seq DROP IDENTITY;
    EXECUTE format('ALTER TABLE task_events RENAME TO %I', old);
    -- The parent's indexes take the old names; the partition's keep theirs
    -- under its own name.
    FOREACH idx IN ARRAY ARRAY['position', 'type', 'worker', 'actor', 'gated_claims'] LOOP
        EXECUTE format('ALTER INDEX IF EXISTS %I RENAME TO %I', 'task_events_' || idx, old || '_' || idx);
    END LOOP;
    -- The parent's primary key adopts only a child's constraint: the
    -- index becomes the partition's primary key (no scan: both columns
    -- are NOT NULL already).
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY USING INDEX task_events_054_seq', old, old || '_pkey');
    EXECUTE format('ALTER INDEX task_events_054_stream RENAME TO %I', old || '_stream');

    EXECUTE format($t$
        CREATE TABLE task_events (
            seq            bigint GENERATED ALWAYS AS IDENTITY (START WITH %s),
            tx_id          xid8        NOT NULL DEFAULT pg_current_xact_id(),
            stream_type    text        NOT NULL,
            stream_id      uuid        NOT NULL,
            version        int         NOT NULL CONSTRAINT task_events_version_check CHECK (version > 0),
            type           text        NOT NULL,
            schema_version int         NOT NULL DEFAULT 1,
            data           jsonb       NOT NULL,
            meta           jsonb       NOT NULL,
            occurred_at    timestamptz NOT NULL,
            PRIMARY KEY (seq, occurred_at)
        ) PARTITION BY RANGE (occurred_at)$t$, next_seq);
    CREATE INDEX task_events_stream ON task_events (stream_id, version);
    CREATE INDEX task_events_position ON task_events (tx_id, seq);
    CREATE INDEX task_events_type ON task_events (type, tx_id, seq);
    CREATE INDEX task_events_worker ON task_events ((data->>'worker_id'), tx_id, seq) WHERE data ? 'worker_id';
    CREATE INDEX task_events_actor ON task_events ((meta->'actor'->>'id'), tx_id, seq);
    CREATE INDEX task_events_gated_claims ON task_events ((data->>'task_type_id'), occurred_at)
        WHERE type = 'task.claimed' AND data ? 'task_type_id';
    CREATE TABLE task_events_default PARTITION OF task_events DEFAULT;
    EXECUTE format('ALTER TABLE task_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', old, lo, hi);
    -- A partition's indexes are named after the partitioned table's
    -- (task_events_position: task_events_default_position), as the
    -- maintenance names those of the partitions it creates.
    FOR idx IN
        SELECT format('ALTER INDEX %I RENAME TO %I', c.relname, 'task_events_default' || substr(p.relname, length('task_events') + 1))
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
          JOIN pg_index x ON x.indexrelid = c.oid
         WHERE x.indrelid = 'task_events_default'::regclass
           AND c.relname <> 'task_events_default' || substr(p.relname, length('task_events') + 1)
    LOOP
        EXECUTE idx;
    END LOOP;
END $$;

CREATE FUNCTION task_stream_lost_race() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'another write to the same stream won'
        USING ERRCODE = 'unique_violation', CONSTRAINT = 'event_streams_version';
END $$;

-- The guard of the streams other than tasks': every statement that inserts
-- their events moves their heads. A stream's new events must be
-- consecutive and start right after its head, or the statement fails; a
-- stream without a head (a new one) gets one, and of two writers creating
-- it the second fails. A statement of task events only does nothing here.
CREATE FUNCTION task_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    streams bigint;
    moved   bigint;
BEGIN
    -- Most statements write task events only: leave before the heads'
    -- statement is even started.
    IF NOT EXISTS (SELECT 1 FROM new_events WHERE stream_type <> 'task') THEN
        RETURN NULL;
    END IF;
    WITH s AS MATERIALIZED (
        SELECT stream_id, min(version) AS lo, max(version) AS hi,
               max(version) - min(version) + 1 = count(*) AND count(DISTINCT version) = count(*) AS runs
          FROM new_events WHERE stream_type <> 'task' GROUP BY stream_id
    ), advanced AS (
        UPDATE event_streams h SET version = s.hi FROM s
         WHERE h.stream_id = s.stream_id AND s.runs AND h.version = s.lo - 1
        RETURNING 1
    ), created AS (
        INSERT INTO event_streams (stream_id, version)
        SELECT stream_id, hi FROM s WHERE runs ORDER BY stream_id
        ON CONFLICT (stream_id) DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM advanced) + (SELECT count(*) FROM created)
      INTO streams, moved;
    IF moved <> streams THEN
        RAISE EXCEPTION 'another write to the same stream won: % of % streams did not continue their head', streams - moved, streams
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'event_streams_version', TABLE = 'event_streams';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER task_events_guard AFTER INSERT ON task_events
    REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION task_events_guard();

-- The heads are to the log what the unique key's index was: emptying the
-- log (a test, a scratch database) empties them.
CREATE FUNCTION task_events_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE event_streams;
    RETURN NULL;
END $$;
CREATE TRIGGER task_events_truncated AFTER TRUNCATE ON task_events
    FOR EACH STATEMENT EXECUTE FUNCTION task_events_truncated();
