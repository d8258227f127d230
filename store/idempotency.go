package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// IdempotencyTTL is how long an Idempotency-Key's answer is kept: a request
// with the same key after that is a new request.
const IdempotencyTTL = 24 * time.Hour

// Answer is the first answer to a request with an Idempotency-Key.
type Answer struct {
	RequestHash []byte // what the request was: method, path, query and body
	Status      int
	Body        []byte
	CreatedAt   time.Time
}

// idempotencyLockClass is the first half of an Idempotency-Key's advisory
// lock (see uniqueLockClass).
const idempotencyLockClass = 0x69646b // "idk"

// LockIdempotencyKey takes the transaction-scoped lock of principal's key
// and then reads its answer: nil when there is none from the last
// IdempotencyTTL. The lock makes the requests with one key run one after
// the other across instances; the read, a statement that starts after the
// lock is granted, sees the answer the one before committed.
func (db *DB) LockIdempotencyKey(ctx context.Context, tx pgx.Tx, principal, key string) (*Answer, error) {
	h := fnv.New32a()
	h.Write([]byte(principal))
	h.Write([]byte{0})
	h.Write([]byte(key))
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, int32(idempotencyLockClass), int32(h.Sum32()))
	b.Queue(`SELECT request_hash, status, response, created_at FROM idempotency_keys
		WHERE principal = $1 AND key = $2 AND created_at > $3`, principal, key, db.Now().Add(-IdempotencyTTL))
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, mapErr(fmt.Errorf("lock idempotency key: %w", err))
	}
	var a Answer
	err := br.QueryRow().Scan(&a.RequestHash, &a.Status, &a.Body, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, br.Close()
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("read idempotency key: %w", err))
	}
	return &a, br.Close()
}

// SaveIdempotencyKey records the answer to principal's key in tx, the
// transaction that made what the request created; an expired answer to the
// same key is replaced.
func (db *DB) SaveIdempotencyKey(ctx context.Context, tx pgx.Tx, principal, key string, a Answer) error {
	_, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, request_hash, status, response, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (principal, key) DO UPDATE SET request_hash = excluded.request_hash, status = excluded.status,
		    response = excluded.response, created_at = excluded.created_at`,
		principal, key, a.RequestHash, a.Status, a.Body, db.Now())
	return mapErr(err)
}

// idempotencyPruneBatch bounds the rows one prune statement deletes, so a
// day of keys is never one long transaction.
const idempotencyPruneBatch = 1000

// PruneIdempotencyKeys deletes the answers older than IdempotencyTTL, a
// batch at a time (rows another instance is deleting are skipped), and
// returns how many it deleted.
func (db *DB) PruneIdempotencyKeys(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := db.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE (principal, key) IN (
			SELECT principal, key FROM idempotency_keys WHERE created_at < $1
			 ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, db.Now().Add(-IdempotencyTTL), idempotencyPruneBatch)
		if err != nil {
			return total, mapErr(fmt.Errorf("prune idempotency keys: %w", err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < idempotencyPruneBatch {
			return total, nil
		}
	}
}

type requestTx struct{}

// ContextWithTx makes the store's statements made with ctx join tx: every
// statement given the pool (and WithTx) runs in tx instead (see Conn). The API wraps a request
// with an Idempotency-Key in one transaction this way, so that what it
// creates and its recorded answer commit together.
func ContextWithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, requestTx{}, tx)
}

func txOf(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(requestTx{}).(pgx.Tx)
	return tx
}

// ambient is q, or the transaction ctx carries when q is the pool: for
// the code that decides by q's type whether it runs in a transaction.
func (db *DB) ambient(ctx context.Context, q Querier) Querier {
	if p, ok := q.(*pgxpool.Pool); ok && p == db.pool.Pool {
		q = db.pool
	}
	if q == Querier(db.pool) {
		if tx := txOf(ctx); tx != nil {
			return tx
		}
	}
	return q
}
