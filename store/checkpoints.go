package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	db.sawCheckpoint(name, cp.Position, false)
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
	db.sawCheckpoint(name, pos, false)
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
	// The probes name the time of the reactor's checkpoint as this instance
	// last saw it (checkpoints only move forward); when the row is behind
	// that (a failover to a standby that lagged), the look is made again
	// with no time.
	seen, bounded := db.checkpointSeen(name)
	for {
		var w Work
		var txID string
		// Until ClockSkew ahead: the partitions made ahead of today are not
		// probed. An event stamped further ahead is seen once the clock
		// gets within that of it.
		b := timeBounds{until: db.Now().Add(ClockSkew)}
		if bounded {
			b.from, bounded = db.logFloor(seen)
		}
		args := []any{name}
		sql := pendingSQL(types, b, &args)
		w.Checkpoint.Name = name
		err := db.pool.QueryRow(ctx, sql, args...).Scan(&w.Visible, &w.Hidden,
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
		if bounded && w.Checkpoint.Position.Less(seen) {
			db.sawCheckpoint(name, w.Checkpoint.Position, true)
			bounded = false
			continue
		}
		db.sawCheckpoint(name, w.Checkpoint.Position, false)
		return w, nil
	}
}

// checkpointSeen is the reactor's checkpoint as this instance last read or
// wrote it.
func (db *DB) checkpointSeen(name string) (events.Position, bool) {
	v, ok := db.checkpoints.Load(name)
	if !ok {
		return events.Position{}, false
	}
	return v.(events.Position), true
}

// sawCheckpoint records a reactor's checkpoint; a position behind the one
// recorded replaces it only when back says the row went back.
func (db *DB) sawCheckpoint(name string, pos events.Position, back bool) {
	if old, ok := db.checkpointSeen(name); ok && pos.Less(old) && !back {
		return
	}
	db.checkpoints.Store(name, pos)
}

func pendingSQL(types []string, b timeBounds, args *[]any) string {
	const cp = `WITH c AS MATERIALIZED (
		    SELECT tx_id, seq, coalesce(lease_holder, '') AS lease_holder, lease_until,
		           pg_snapshot_xmin(pg_current_snapshot()) AS horizon
		      FROM reactor_checkpoints WHERE name = $1) `
	const tail = `, c.tx_id::text, c.seq, c.lease_holder, c.lease_until FROM c`
	at := b.render("e.occurred_at", args)
	if len(types) == 0 {
		return cp + `SELECT EXISTS (SELECT 1 FROM task_events e
		        WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq) AND e.tx_id < c.horizon` + at + `),
		       EXISTS (SELECT 1 FROM task_events e
		        WHERE e.tx_id >= c.horizon AND (e.tx_id, e.seq) > (c.tx_id, c.seq)` + at + `)` + tail
	}
	// Each type a literal (readLogSQL says why).
	probe := func(cond string) string {
		return `EXISTS (` + typeBranches(types, func(lit string) string {
			return `SELECT 1 FROM task_events e WHERE e.type = ` + lit + ` AND (e.tx_id, e.seq) > (c.tx_id, c.seq) AND ` + cond + at + `
		     ORDER BY e.tx_id, e.seq LIMIT 1`
		}) + `)`
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
	// The checkpoints first (a row per reactor), so that the lag statement
	// names the time from which it reads: the earliest of the checkpoints'
	// log marks (none when one is before every mark). A statement on a
	// log partitioned by time plans only the partitions from there on.
	rows, err := db.pool.Query(ctx, `SELECT name, tx_id::text, seq, types, updated_at FROM reactor_checkpoints ORDER BY name`)
	if err != nil {
		return nil, mapErr(fmt.Errorf("reactor lag: %w", err))
	}
	var names, txs []string
	var seqs []int64
	var types [][]string
	var updated []time.Time
	var b timeBounds
	bounded := true
	for rows.Next() {
		var name, tx string
		var seq int64
		var ts []string
		var at time.Time
		if err := rows.Scan(&name, &tx, &seq, &ts, &at); err != nil {
			rows.Close()
			return nil, mapErr(err)
		}
		var pos events.Position
		if _, err := fmt.Sscan(tx, &pos.TxID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("checkpoint %s: tx_id %q: %w", name, tx, err)
		}
		pos.Seq = seq
		if f, ok := db.logFloor(pos); !ok {
			bounded = false
		} else if b.from.IsZero() || f.Before(b.from) {
			b.from = f
		}
		names, txs, seqs, types, updated = append(names, name), append(txs, tx), append(seqs, seq), append(types, ts), append(updated, at)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	out := []ReactorLag{}
	if len(names) == 0 {
		return out, nil
	}
	if !bounded {
		b = timeBounds{}
	}
	now := db.Now()
	args := []any{maxLagCount}
	at := b.render("e.occurred_at", &args)
	// types travel as one text[] literal each: unnest cannot take a
	// ragged text[][].
	typeLists := make([]string, len(types))
	for i, ts := range types {
		typeLists[i] = "{" + strings.Join(quoteArray(ts), ",") + "}"
	}
	args = append(args, names, txs, seqs, typeLists)
	n := len(args)
	rows, err = db.pool.Query(ctx, fmt.Sprintf(`SELECT c.name, l.n, l.oldest
		  FROM unnest($%d::text[], $%d::text[], $%d::bigint[], $%d::text[]) AS r(name, tx, seq, types),
		  LATERAL (SELECT r.name, r.tx::xid8 AS tx_id, r.seq, r.types::text[] AS types) c,
		  LATERAL (SELECT count(*) AS n, min(x.occurred_at) AS oldest FROM (
		      SELECT e.occurred_at FROM unnest(c.types) AS t(want), LATERAL (
		          SELECT occurred_at FROM task_events e
		           WHERE e.type = t.want AND (e.tx_id, e.seq) > (c.tx_id, c.seq)`+at+`
		           ORDER BY e.tx_id, e.seq LIMIT $1) e
		      UNION ALL
		      (SELECT e.occurred_at FROM task_events e
		        WHERE cardinality(c.types) = 0 AND (e.tx_id, e.seq) > (c.tx_id, c.seq)`+at+`
		        ORDER BY e.tx_id, e.seq LIMIT $1)) x) l`, n-3, n-2, n-1, n), args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("reactor lag: %w", err))
	}
	defer rows.Close()
	byName := map[string]ReactorLag{}
	for rows.Next() {
		var l ReactorLag
		var oldest *time.Time
		if err := rows.Scan(&l.Name, &l.EventsBehind, &oldest); err != nil {
			return nil, mapErr(err)
		}
		if oldest != nil {
			l.SecondsBehind = max(0, now.Sub(*oldest).Seconds())
		}
		byName[l.Name] = l
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	for i, name := range names {
		l := byName[name]
		l.Name = name
		l.Position = txs[i] + "-" + fmt.Sprint(seqs[i])
		l.UpdatedAt = updated[i].UTC()
		out = append(out, l)
	}
	return out, nil
}

// quoteArray quotes each of ss as an element of a PostgreSQL array literal.
func quoteArray(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
	}
	return out
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
