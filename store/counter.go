package store

import (
	"context"
	"fmt"
)

// CounterBehindError says the database holds transaction ids (events' tx_id,
// reactors' checkpoints) at or beyond the server's next one. One server never
// gets there: its counter only grows. A logical restore (pg_dump and
// pg_restore or psql) does: the new cluster counts afresh, so the events
// appended now would sort before the old ones, where the consumers, who
// are past them, never look, and the old ones would stay above the horizon
// that readers wait for. Writing on would bury new events; the cure is to
// move the counter past the stored ids before anything writes.
type CounterBehindError struct {
	Stored uint64 // the greatest transaction id stored
	Next   uint64 // the server's next transaction id
}

// Epoch is what `pg_resetwal -e` must set: the counter's high 32 bits. Its
// low 32 bits stay (the server's own tuples refer to them), so the next id
// becomes Epoch<<32 plus those, past every stored id.
func (e *CounterBehindError) Epoch() uint64 { return e.Stored>>32 + 1 }

func (e *CounterBehindError) Error() string {
	return fmt.Sprintf("this database holds transaction id %d, at or beyond the server's next transaction id %d: "+
		"it was restored from a logical dump (pg_dump), which does not carry PostgreSQL's transaction counter, "+
		"and new events would sort before the ones it holds, where no consumer looks. Nothing was written. "+
		"Stop every replica, stop the server cleanly, run `pg_resetwal -e %d -D <data directory>` as the server's "+
		"user, start the server, then the replicas (docs/deploy.md, \"Restoring from a logical dump\")",
		e.Stored, e.Next, e.Epoch())
}

// CheckCounter returns a *CounterBehindError when the database holds a
// transaction id at or beyond the server's next one, nil otherwise. The
// log's greatest id is one probe of task_events_position; the checkpoints
// are a row per reactor. (No max() of xid8 before PostgreSQL 14.)
func CheckCounter(ctx context.Context, q Querier) error {
	var next int64
	var stored *int64
	err := q.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
  GREATEST((SELECT tx_id FROM task_events ORDER BY tx_id DESC LIMIT 1),
           (SELECT tx_id FROM reactor_checkpoints ORDER BY tx_id DESC LIMIT 1))::text::bigint`).Scan(&next, &stored)
	if err != nil {
		return mapErr(fmt.Errorf("check the transaction counter: %w", err))
	}
	if stored != nil && *stored >= next {
		return &CounterBehindError{Stored: uint64(*stored), Next: uint64(next)}
	}
	return nil
}
