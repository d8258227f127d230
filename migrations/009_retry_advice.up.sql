-- Retry advice asked for a task.failed event (issue 15). A row is written
-- before the advisor (Claude) is called and its answer after, so each
-- failure costs at most one call whatever happens between the call and the
-- batch that uses it (a database restart, a lease passing to another
-- instance, a crash). Not a projection: the decision itself is in the
-- events; a row lives until the batch that decides its failure commits.
CREATE TABLE retry_advice (
    event_seq   bigint PRIMARY KEY,
    asked_by    text        NOT NULL,
    asked_at    timestamptz NOT NULL,
    answered_at timestamptz,
    skip        boolean     NOT NULL DEFAULT false,
    reason      text        NOT NULL DEFAULT '',
    hint        text        NOT NULL DEFAULT ''
);

-- Failures of kind error (the ones worth advice) get their own reactor, so a
-- slow advisor call never delays the retry of a timeout or an offline
-- worker. It starts where the retry reactor is: everything before was
-- decided already.
INSERT INTO reactor_checkpoints (name, tx_id, seq, types)
SELECT 'retry_advice', tx_id, seq, types FROM reactor_checkpoints WHERE name = 'retry'
ON CONFLICT (name) DO NOTHING;
