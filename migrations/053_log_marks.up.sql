-- Marks that bound the event log's reads by time (issue 28, ADR 034): a
-- mark (tx_id, seq, occurred_at) says that every event at or after the
-- position (tx_id, seq) in consumer order occurred at or after occurred_at.
-- A read after a position then names occurred_at >= the mark's time below
-- it, so a log partitioned by time plans and reads only the partitions from
-- there on, whatever the reader's position looks like ("tx-seq").
--
-- Marks of the log already written are exact: for each UTC day d, the
-- position right after the greatest one of the events that occurred before
-- d (log_marks_seed, which a synthetic log's writer calls again). The
-- service adds one every 15 minutes: the next transaction id not yet given
-- out, with the instance's time less the clock skew the archive allows
-- (an event's time is taken at most that long before its transaction
-- writes; store/marks.go).
CREATE TABLE log_marks (
    tx_id       xid8        NOT NULL,
    seq         bigint      NOT NULL,
    occurred_at timestamptz NOT NULL,
    PRIMARY KEY (tx_id, seq)
);

CREATE FUNCTION log_marks_seed() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    d       record;
    best_tx xid8;
    best_seq bigint;
    n       bigint := 0;
BEGIN
    -- Days that ended at least an hour ago (archive.Skew): no event of
    -- theirs can still commit.
    FOR d IN
        SELECT DISTINCT ON (day) day + interval '1 day' AS upto, tx_id, seq
          FROM (SELECT date_trunc('day', occurred_at, 'UTC') AS day, tx_id, seq FROM task_events) e
         WHERE day + interval '1 day' <= now() - interval '1 hour'
         ORDER BY day, tx_id DESC, seq DESC
    LOOP
        IF best_tx IS NULL OR (d.tx_id, d.seq) > (best_tx, best_seq) THEN
            best_tx := d.tx_id;
            best_seq := d.seq;
        END IF;
        INSERT INTO log_marks (tx_id, seq, occurred_at) VALUES (best_tx, best_seq + 1, d.upto)
            ON CONFLICT (tx_id, seq) DO UPDATE SET occurred_at = greatest(log_marks.occurred_at, excluded.occurred_at);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

SELECT log_marks_seed();
