package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Account commands (issue 11): each reads the user, decides, and appends
// the events with the users row in one batch; a lost race decides again.

// UserDecision decides a command on the current state of a user.
type UserDecision func(u *events.User) ([]events.Payload, error)

// UpdateUser runs decide on user id. No events: the user as it is.
func (db *DB) UpdateUser(ctx context.Context, id string, meta events.Meta, decide UserDecision) (*events.User, error) {
	return db.updateUser(ctx, id, meta, decide, nil)
}

func (db *DB) updateUser(ctx context.Context, id string, meta events.Meta, decide UserDecision, extra func(*pgx.Batch)) (*events.User, error) {
	for attempt := 1; ; attempt++ {
		u, err := db.GetUser(ctx, id)
		if err != nil {
			return nil, err
		}
		ps, err := decide(u)
		if err != nil || len(ps) == 0 {
			return u, err
		}
		after, _, err := appendStream(ctx, db, db.pool, events.StreamUser, id, u, ps, meta, db.projector.User, extra)
		if errors.Is(err, events.ErrConflict) && attempt < maxRaces {
			continue
		}
		return after, err
	}
}

// SetPassword stores a new password hash with user.password_changed (by
// "self" or "admin"); the hash stays outside the log (ADR 002).
func (db *DB) SetPassword(ctx context.Context, id, password, hash, by string, meta events.Meta) (*events.User, error) {
	ps, err := events.ChangePassword(password, by)
	if err != nil {
		return nil, err
	}
	return db.updateUser(ctx, id, meta, func(*events.User) ([]events.Payload, error) { return ps, nil },
		func(b *pgx.Batch) {
			b.Queue(`UPDATE user_credentials SET password_hash = $2 WHERE user_id = $1`, id, hash)
		})
}

// LockOut appends user.locked_out after failures wrong passwords in a row.
func (db *DB) LockOut(ctx context.Context, id string, failures int, client string, pol events.LockoutPolicy, meta events.Meta) (*events.User, error) {
	return db.UpdateUser(ctx, id, meta, func(u *events.User) ([]events.Payload, error) {
		if _, locked := u.LockedAt(db.Now()); locked {
			return nil, nil // another instance locked it first
		}
		return u.LockOut(failures, client, pol, db.Now()), nil
	})
}

// DeactivateUser deactivates id and, in the same transaction, releases the
// tasks it holds (in progress, or pending and assigned to it) to the pool,
// each with task.released and the reason. The user's row is locked first:
// a claim of that worker waits for it and then sees the user inactive.
func (db *DB) DeactivateUser(ctx context.Context, id, reason string, meta events.Meta) (*events.User, error) {
	var after *events.User
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		var u events.User
		err := tx.QueryRow(ctx, `SELECT `+userColumns+` FROM users u WHERE u.id = $1 FOR UPDATE`, id).Scan(userDest(&u)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return events.NotFound("user", id)
		}
		if err != nil {
			return mapErr(fmt.Errorf("deactivate: %w", err))
		}
		normalizeUser(&u)
		if _, err := u.Deactivate(reason, nil, meta.Actor.ID); err != nil {
			return err
		}
		why := "worker deactivated"
		if reason != "" {
			why += ": " + reason
		}
		released, err := db.releaseHeld(ctx, tx, id, []events.Status{events.StatusPending, events.StatusInProgress}, why, meta, 0)
		if err != nil {
			return err
		}
		ps, err := u.Deactivate(reason, released, meta.Actor.ID)
		if err != nil {
			return err
		}
		after, _, err = appendStream(ctx, db, tx, events.StreamUser, id, &u, ps, meta, db.projector.User, nil)
		return err
	})
	return after, err
}

// releaseHeld gives the tasks workerID holds in one of statuses back to the
// pool (at most limit of them; 0: all), each with task.released and why, in
// tx, and returns their ids. The caller has locked the worker's row, so no
// claim of that worker runs meanwhile; a task that has moved on since it was
// listed is left as it is.
func (db *DB) releaseHeld(ctx context.Context, tx pgx.Tx, workerID string, statuses []events.Status, why string, meta events.Meta, limit int) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM worker_tasks
		WHERE assigned_to = $1 AND status = ANY($2) ORDER BY id LIMIT nullif($3, 0)`, workerID, statuses, limit)
	if err != nil {
		return nil, mapErr(err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr(err)
	}
	released := []string{}
	for _, taskID := range held {
		_, _, err := db.UpdateTask(ctx, tx, taskID, meta, func(t *events.Task) ([]events.Payload, error) {
			if !slices.Contains(statuses, t.Status) {
				return nil, errMovedOn
			}
			return t.ReleaseHeld(workerID, why)
		})
		if errors.Is(err, errMovedOn) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("release task %s: %w", taskID, err)
		}
		released = append(released, taskID)
	}
	return released, nil
}

// CredentialsByID returns the user id and its password hash.
func (db *DB) CredentialsByID(ctx context.Context, id string) (*events.User, string, error) {
	var u events.User
	var hash string
	err := db.pool.QueryRow(ctx, `SELECT `+userColumns+`, c.password_hash
		FROM users u JOIN user_credentials c ON c.user_id = u.id WHERE u.id = $1`, id).
		Scan(append(userDest(&u), &hash)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", events.NotFound("user", id)
	}
	if err != nil {
		return nil, "", mapErr(fmt.Errorf("credentials: %w", err))
	}
	normalizeUser(&u)
	return &u, hash, nil
}

// AuthChange is an event after which a user authenticates differently.
type AuthChange struct {
	UserID  string
	Version int
}

// AuthChangesStart is where a follower of AuthChanges starts: every event
// before it belongs to a transaction that has ended, so a user read after
// this call already reflects it.
func (db *DB) AuthChangesStart(ctx context.Context) (events.Position, error) {
	var xmin int64
	err := db.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin)
	return events.Position{TxID: uint64(xmin)}, mapErr(err)
}

// authChanges reads the auth events after a position, including those of
// transactions committed beyond the consumers' horizon (DESIGN §2): a long
// transaction elsewhere must not delay a revocation. Rows past the horizon
// are read again on the next call (a follower must treat them idempotently);
// next is where that call starts.
func authChangesSQL(b timeBounds, args *[]any) string {
	at := b.render("task_events.occurred_at", args)
	// Each type a literal (readLogSQL says why).
	return `WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin)
SELECT h.xmin, e.tx, e.seq, e.sid, e.version FROM h LEFT JOIN (
    SELECT c.tx_id::text::bigint AS tx, c.seq, c.stream_id::text AS sid, c.version, c.tx_id AS tx_order
      FROM (` + typeBranches(events.AuthEventTypes, func(lit string) string {
		return `SELECT task_events.tx_id, task_events.seq, task_events.stream_id, task_events.version FROM task_events
         WHERE task_events.type = ` + lit + ` AND (task_events.tx_id, task_events.seq) > ($1::text::xid8, $2)` + at + `
         ORDER BY task_events.tx_id, task_events.seq LIMIT $3`
	}) + `) c
     ORDER BY c.tx_id, c.seq LIMIT $3) e ON true
 ORDER BY e.tx_order, e.seq`
}

// ErrLogRewound says a position read from this database is ahead of it:
// positions only move forward on one server (they never pass the snapshot's
// xmin), so the server is another one that is behind, such as a standby
// promoted with replication lag, which hands out the lost transaction ids
// again. A follower must drop what it derived and start again from now.
var ErrLogRewound = errors.New("the database is behind this instance's position in the log (a failover to a standby that lagged?)")

// AuthChanges returns the auth events (events.AuthEventTypes) after pos, at
// most limit, and the position the next call starts from.
func (db *DB) AuthChanges(ctx context.Context, after events.Position, limit int) ([]AuthChange, events.Position, error) {
	// The position's log mark bounds the read by time; AuthChangesStart's
	// xmin is a position like any other.
	var b timeBounds
	b.from, _ = db.logFloor(after)
	args := []any{fmt.Sprint(after.TxID), after.Seq, limit}
	rows, err := db.pool.Query(ctx, authChangesSQL(b, &args), args...)
	if err != nil {
		return nil, after, mapErr(fmt.Errorf("auth changes: %w", err))
	}
	defer rows.Close()
	var out []AuthChange
	var xmin int64
	next := after
	below := true // every row so far is below the horizon
	for rows.Next() {
		var tx, seq *int64
		var sid *string
		var version *int
		if err := rows.Scan(&xmin, &tx, &seq, &sid, &version); err != nil {
			return nil, after, mapErr(err)
		}
		if tx == nil {
			continue
		}
		out = append(out, AuthChange{UserID: *sid, Version: *version})
		if below && *tx < xmin {
			next = events.Position{TxID: uint64(*tx), Seq: *seq}
		} else {
			below = false
		}
	}
	if err := rows.Err(); err != nil {
		return nil, after, mapErr(err)
	}
	if after.TxID > uint64(xmin) {
		return nil, after, ErrLogRewound
	}
	if below && len(out) < limit && next.Less(events.Position{TxID: uint64(xmin)}) {
		// Every row below the horizon was read: start next time at it.
		next = events.Position{TxID: uint64(xmin)}
	}
	return out, next, nil
}
