-- Supplementary archive objects (issue 28, ADR 035): events that commit
-- after their period was archived (a command's time taken long before its
-- insert commits, an instance's clock behind) are in no object of the
-- period, so compaction could never delete them, nor compact their chains.
--
-- A period's parts: part 0 is its object (events/day/2026-11-20.jsonl.gz),
-- part N > 0 its N-th supplement (events/day/2026-11-20.N.jsonl.gz), which
-- holds the period's events with seq in [seq_lo, seq_hi] visible in its
-- snapshot that no earlier part holds. An event is archived exactly when
-- some part's range and snapshot hold it.
ALTER TABLE event_archives ADD COLUMN part int NOT NULL DEFAULT 0 CHECK (part >= 0);
ALTER TABLE event_archives DROP CONSTRAINT event_archives_pkey, ADD PRIMARY KEY (period, period_start, part);

-- The periods in which compaction met events no part holds, with the seqs
-- it met: the archive writes the period's next part over them, then
-- deletes the row (unless compaction widened it meanwhile).
CREATE TABLE event_archive_late (
    period       text        NOT NULL CHECK (period IN ('day', 'week')),
    period_start date        NOT NULL,
    seq_lo       bigint      NOT NULL,
    seq_hi       bigint      NOT NULL,
    found_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (period, period_start)
);
