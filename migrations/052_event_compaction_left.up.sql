-- The chains compaction left (issue 28, ADR 035): a pass records each chain
-- it has to leave for a reason other than a missing archive, and moves its
-- cursor on, instead of starting every later pass at the first such chain
-- (which, for a chain open for months, made every pass walk, lock and
-- re-read every chain after it). Later passes revisit these first: those
-- with a blocker (the task still open, or awaiting its retry decision) when
-- its version moved, the others every pass.
CREATE TABLE event_compaction_left (
    root            uuid        PRIMARY KEY,
    created_at      timestamptz NOT NULL,
    reason          text        NOT NULL,
    blocker         uuid,
    blocker_version int,
    left_at         timestamptz NOT NULL DEFAULT now()
);
