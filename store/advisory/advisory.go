// Package advisory holds a PostgreSQL session advisory lock on a pool
// connection, for a pass that only one instance may run at a time
// (compaction, the archive, partition maintenance, schedule pruning).
package advisory

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TryLock acquires a connection of pool and takes the session advisory
// lock key on it. ok is false (and conn nil) when another session holds
// the lock. release unlocks, closing the connection when the unlock fails
// (the lock would stay with the session), and gives it back to the pool.
func TryLock(ctx context.Context, pool *pgxpool.Pool, key int64) (conn *pgxpool.Conn, release func(), ok bool, err error) {
	conn, err = pool.Acquire(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, nil, false, err
	}
	return conn, func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}, true, nil
}
