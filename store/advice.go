package store

import (
	"context"
	"fmt"
)

// StoredAdvice is what is recorded about the advice asked for one
// task.failed event (by its seq).
type StoredAdvice struct {
	Seq int64
	// Answered is false while the call runs, and forever when the asker
	// died or could not record the answer: the failure gets the template.
	Answered     bool
	Skip         bool
	Reason, Hint string
}

// ClaimAdvice records holder as the asker for every failure in seqs nobody
// has asked about yet and returns those (mine): only they may be asked. For
// the others it returns what is recorded (known). A seq in neither is being
// claimed by a concurrent caller right now. One statement, outside any
// transaction, before the calls.
func (db *DB) ClaimAdvice(ctx context.Context, seqs []int64, holder string) (mine []int64, known map[int64]StoredAdvice, err error) {
	rows, err := db.pool.Query(ctx, `WITH ins AS (
		    INSERT INTO retry_advice (event_seq, asked_by, asked_at)
		    SELECT s, $2, $3 FROM unnest($1::bigint[]) AS s ON CONFLICT (event_seq) DO NOTHING
		    RETURNING event_seq
		)
		SELECT event_seq, true, false, false, '', '' FROM ins
		UNION ALL
		SELECT event_seq, false, answered_at IS NOT NULL, skip, reason, hint FROM retry_advice
		 WHERE event_seq = ANY($1::bigint[])`, seqs, holder, db.Now())
	if err != nil {
		return nil, nil, mapErr(fmt.Errorf("claim advice: %w", err))
	}
	defer rows.Close()
	known = map[int64]StoredAdvice{}
	for rows.Next() {
		var a StoredAdvice
		var isMine bool
		if err := rows.Scan(&a.Seq, &isMine, &a.Answered, &a.Skip, &a.Reason, &a.Hint); err != nil {
			return nil, nil, fmt.Errorf("claim advice: %w", err)
		}
		if isMine {
			mine = append(mine, a.Seq)
		} else {
			known[a.Seq] = a
		}
	}
	return mine, known, mapErr(rows.Err())
}

// SaveAdvice records the answer to a call ClaimAdvice allowed.
func (db *DB) SaveAdvice(ctx context.Context, a StoredAdvice) error {
	_, err := db.pool.Exec(ctx, `UPDATE retry_advice SET answered_at = $2, skip = $3, reason = $4, hint = $5
		WHERE event_seq = $1`, a.Seq, db.Now(), a.Skip, a.Reason, a.Hint)
	return mapErr(err)
}

// ForgetAdvice drops the records of decided failures, in the transaction
// that decides them.
func (db *DB) ForgetAdvice(ctx context.Context, q Querier, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, `DELETE FROM retry_advice WHERE event_seq = ANY($1::bigint[])`, seqs)
	return mapErr(err)
}
