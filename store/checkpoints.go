package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Checkpoint is a reactor's stored place in the log (DESIGN §5).
type Checkpoint struct {
	Name     string
	Position events.Position
	// LeaseHolder holds the reactor while it prepares a batch outside any
	// transaction; "" when nobody does.
	LeaseHolder string
	LeaseUntil  *time.Time
}

// Leased reports whether another holder than me has an unexpired lease.
func (c Checkpoint) Leased(me string, now time.Time) bool {
	return c.LeaseHolder != "" && c.LeaseHolder != me && c.LeaseUntil != nil && c.LeaseUntil.After(now)
}

// EnsureCheckpoint creates the reactor's row at the start of the log when it
// is missing, and records the event types it reads (for lag). A migration
// may seed a row at the log's head to make a new reactor skip history.
func (db *DB) EnsureCheckpoint(ctx context.Context, name string, types []string) error {
	if types == nil {
		types = []string{}
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO reactor_checkpoints (name, types, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET types = excluded.types
		WHERE reactor_checkpoints.types IS DISTINCT FROM excluded.types`, name, types, db.Now())
	return mapErr(err)
}

// LockCheckpoint locks the reactor's row in tx with SKIP LOCKED; ok is false
// when another instance holds it (that instance runs the batch).
func (db *DB) LockCheckpoint(ctx context.Context, tx pgx.Tx, name string) (cp Checkpoint, ok bool, err error) {
	var txID string
	cp.Name = name
	err = tx.QueryRow(ctx, `SELECT tx_id::text, seq, coalesce(lease_holder, ''), lease_until
		FROM reactor_checkpoints WHERE name = $1 FOR UPDATE SKIP LOCKED`, name).
		Scan(&txID, &cp.Position.Seq, &cp.LeaseHolder, &cp.LeaseUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, mapErr(fmt.Errorf("lock checkpoint %s: %w", name, err))
	}
	if _, err := fmt.Sscan(txID, &cp.Position.TxID); err != nil {
		return cp, false, fmt.Errorf("checkpoint %s: tx_id %q: %w", name, txID, err)
	}
	return cp, true, nil
}

// SaveCheckpoint moves the reactor to pos in tx and ends any lease.
func (db *DB) SaveCheckpoint(ctx context.Context, tx pgx.Tx, name string, pos events.Position) error {
	_, err := tx.Exec(ctx, `UPDATE reactor_checkpoints
		SET tx_id = $2::text::xid8, seq = $3, lease_holder = NULL, lease_until = NULL, updated_at = $4
		WHERE name = $1`, name, fmt.Sprint(pos.TxID), pos.Seq, db.Now())
	return mapErr(err)
}

// LeaseCheckpoint gives holder the reactor until `until`, unless another
// holder's lease is still running; it returns the reactor's position. One
// statement, outside any transaction: the lease exists so that a batch can be
// prepared (network calls) without holding a transaction open.
func (db *DB) LeaseCheckpoint(ctx context.Context, name, holder string, until time.Time) (events.Position, bool, error) {
	var pos events.Position
	var txID string
	err := db.pool.QueryRow(ctx, `UPDATE reactor_checkpoints SET lease_holder = $2, lease_until = $3
		WHERE name = $1 AND (lease_holder IS NULL OR lease_holder = $2 OR lease_until < $4)
		RETURNING tx_id::text, seq`, name, holder, until, db.Now()).Scan(&txID, &pos.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return pos, false, nil
	}
	if err != nil {
		return pos, false, mapErr(fmt.Errorf("lease checkpoint %s: %w", name, err))
	}
	if _, err := fmt.Sscan(txID, &pos.TxID); err != nil {
		return pos, false, fmt.Errorf("checkpoint %s: tx_id %q: %w", name, txID, err)
	}
	return pos, true, nil
}

// ReleaseCheckpointLease ends holder's lease on the reactor, if it has one.
func (db *DB) ReleaseCheckpointLease(ctx context.Context, name, holder string) error {
	_, err := db.pool.Exec(ctx, `UPDATE reactor_checkpoints SET lease_holder = NULL, lease_until = NULL
		WHERE name = $1 AND lease_holder = $2`, name, holder)
	return mapErr(err)
}

// Work is what a look at a reactor's checkpoint and the log finds.
type Work struct {
	// Visible: events of the reactor's types after its checkpoint, below
	// the horizon, ready to be handled.
	Visible bool
	// Hidden: such events committed above the horizon (an older transaction
	// is still running); they turn visible when it ends.
	Hidden bool
	// Checkpoint's lease, for reactors that prepare batches.
	Checkpoint Checkpoint
}

// Pending looks at what a reactor reading types (all when empty) has to do.
// One read-only statement, so an idle wake costs no transaction id and takes
// no lock; each type is one ordered index probe, so a reactor waiting for
// rare events does not walk the events of other types.
func (db *DB) Pending(ctx context.Context, name string, types []string) (Work, error) {
	var w Work
	var txID string
	args := []any{name}
	if len(types) > 0 {
		args = append(args, types)
	}
	w.Checkpoint.Name = name
	err := db.pool.QueryRow(ctx, pendingSQL(types), args...).Scan(&w.Visible, &w.Hidden,
		&txID, &w.Checkpoint.Position.Seq, &w.Checkpoint.LeaseHolder, &w.Checkpoint.LeaseUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, events.NotFound("reactor checkpoint", name)
	}
	if err != nil {
		return w, mapErr(fmt.Errorf("pending %s: %w", name, err))
	}
	if _, err := fmt.Sscan(txID, &w.Checkpoint.Position.TxID); err != nil {
		return w, fmt.Errorf("checkpoint %s: tx_id %q: %w", name, txID, err)
	}
	return w, nil
}

func pendingSQL(types []string) string {
	const cp = `WITH c AS MATERIALIZED (
		    SELECT tx_id, seq, coalesce(lease_holder, '') AS lease_holder, lease_until,
		           pg_snapshot_xmin(pg_current_snapshot()) AS horizon
		      FROM reactor_checkpoints WHERE name = $1) `
	const tail = `, c.tx_id::text, c.seq, c.lease_holder, c.lease_until FROM c`
	if len(types) == 0 {
		return cp + `SELECT EXISTS (SELECT 1 FROM task_events e
		        WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq) AND e.tx_id < c.horizon),
		       EXISTS (SELECT 1 FROM task_events e
		        WHERE e.tx_id >= c.horizon AND (e.tx_id, e.seq) > (c.tx_id, c.seq))` + tail
	}
	probe := func(cond string) string {
		return `EXISTS (SELECT 1 FROM unnest($2::text[]) AS t(want), LATERAL (
		    SELECT 1 FROM task_events e WHERE e.type = t.want AND (e.tx_id, e.seq) > (c.tx_id, c.seq) AND ` + cond + `
		     ORDER BY e.tx_id, e.seq LIMIT 1) x)`
	}
	return cp + `SELECT ` + probe(`e.tx_id < c.horizon`) + `, ` + probe(`e.tx_id >= c.horizon`) + tail
}

// maxLagCount bounds how many events a lag count reads per type.
const maxLagCount = 10_000

// ReactorLag is how far a reactor is behind the committed log.
type ReactorLag struct {
	Name     string `json:"name"`
	Position string `json:"position"`
	// EventsBehind counts the committed events of the reactor's types after
	// its checkpoint (at most 10,000 per type), those an older transaction
	// still hides from consumers included.
	EventsBehind int `json:"events_behind"`
	// SecondsBehind is the age of the oldest of them; 0 when caught up.
	SecondsBehind float64   `json:"seconds_behind"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// ReactorLags measures every reactor against the committed log, with the
// types its checkpoint row records. Events above the xid horizon count: a
// long transaction anywhere in the cluster hides them from the reactor,
// and the lag must grow while it does, not jump after it ends.
func (db *DB) ReactorLags(ctx context.Context) ([]ReactorLag, error) {
	now := db.Now()
	rows, err := db.pool.Query(ctx, `SELECT c.name, c.tx_id::text, c.seq, c.updated_at, l.n, l.oldest
		  FROM reactor_checkpoints c,
		  LATERAL (SELECT count(*) AS n, min(x.occurred_at) AS oldest FROM (
		      SELECT e.occurred_at FROM unnest(c.types) AS t(want), LATERAL (
		          SELECT occurred_at FROM task_events e
		           WHERE e.type = t.want AND (e.tx_id, e.seq) > (c.tx_id, c.seq)
		           ORDER BY e.tx_id, e.seq LIMIT $1) e
		      UNION ALL
		      (SELECT e.occurred_at FROM task_events e
		        WHERE cardinality(c.types) = 0 AND (e.tx_id, e.seq) > (c.tx_id, c.seq)
		        ORDER BY e.tx_id, e.seq LIMIT $1)) x) l
		 ORDER BY c.name`, maxLagCount)
	if err != nil {
		return nil, mapErr(fmt.Errorf("reactor lag: %w", err))
	}
	defer rows.Close()
	out := []ReactorLag{}
	for rows.Next() {
		var l ReactorLag
		var txID string
		var seq int64
		var oldest *time.Time
		if err := rows.Scan(&l.Name, &txID, &seq, &l.UpdatedAt, &l.EventsBehind, &oldest); err != nil {
			return nil, mapErr(err)
		}
		l.Position = txID + "-" + fmt.Sprint(seq)
		l.UpdatedAt = l.UpdatedAt.UTC()
		if oldest != nil {
			l.SecondsBehind = max(0, now.Sub(*oldest).Seconds())
		}
		out = append(out, l)
	}
	return out, mapErr(rows.Err())
}

// AcquireLease takes or renews the lease name for holder for ttl; false when
// another holder's lease has not expired. Periodic jobs that one instance at
// a time should run (the stuck detector) call it on every tick.
func (db *DB) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	now := db.Now()
	var got string
	err := db.pool.QueryRow(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at < $4
		RETURNING holder`, name, holder, now.Add(ttl), now).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, mapErr(fmt.Errorf("acquire lease %s: %w", name, err))
	}
	return got == holder, nil
}

// ReleaseLease gives the lease up (on shutdown), so another instance need
// not wait for it to expire.
func (db *DB) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := db.pool.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder)
	return mapErr(err)
}
