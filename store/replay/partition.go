package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DefaultPartitionEvents is how many events one fold holds at most, about:
// the log is read one range of stream ids at a time, so memory is bounded by
// this and not by the log (ADR 010).
const DefaultPartitionEvents = 200_000

// setSession prepares a replay connection. Every range runs the same
// statements with other bounds: after five runs PostgreSQL may switch to a
// generic plan, which cannot see that a range is a small part of the log
// and reads all of it (a parallel sequential scan and sort per range, seen
// at 5M events). Custom plans see the bounds.
func setSession(ctx context.Context, conn *pgx.Conn) error {
	for _, s := range []string{`SET plan_cache_mode = force_custom_plan`, `SET work_mem = '64MB'`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// streamRange is the streams with lo <= id < hi; an empty end is open.
type streamRange struct{ lo, hi string }

// where renders the range as a condition on col, appending its arguments.
func (r streamRange) where(col string, args *[]any) string {
	cond := "true"
	if r.lo != "" {
		*args = append(*args, r.lo)
		cond = fmt.Sprintf("%s >= $%d::uuid", col, len(*args))
	}
	if r.hi != "" {
		*args = append(*args, r.hi)
		cond += fmt.Sprintf(" AND %s < $%d::uuid", col, len(*args))
	}
	return cond
}

func (r streamRange) whole() bool { return r.lo == "" && r.hi == "" }

// partitions cuts the log visible to tx into ranges of streams of about n
// events each, walking the (stream_id, version) index: every event of a
// stream falls in one range. A log of at most n events is one range. (The
// text output is named bound: named stream_id, ORDER BY would sort by it
// instead of walking the index.)
func partitions(ctx context.Context, tx pgx.Tx, total int64, n int) ([]streamRange, error) {
	if total <= int64(n) {
		return []streamRange{{}}, nil
	}
	var out []streamRange
	lo := ""
	for {
		var next string
		var err error
		if lo == "" {
			err = tx.QueryRow(ctx, `SELECT stream_id::text AS bound FROM task_events ORDER BY stream_id OFFSET $1 LIMIT 1`, n).Scan(&next)
		} else {
			err = tx.QueryRow(ctx, `SELECT stream_id::text AS bound FROM task_events WHERE stream_id >= $1::uuid
				ORDER BY stream_id OFFSET $2 LIMIT 1`, lo, n).Scan(&next)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return append(out, streamRange{lo: lo}), nil
		}
		if err != nil {
			return nil, fmt.Errorf("cut the log into ranges: %w", err)
		}
		if next == lo { // one stream of more than n events: the range ends after it
			err = tx.QueryRow(ctx, `SELECT stream_id::text AS bound FROM task_events WHERE stream_id > $1::uuid
				ORDER BY stream_id LIMIT 1`, lo).Scan(&next)
			if errors.Is(err, pgx.ErrNoRows) {
				return append(out, streamRange{lo: lo}), nil
			}
			if err != nil {
				return nil, fmt.Errorf("cut the log into ranges: %w", err)
			}
		}
		out = append(out, streamRange{lo: lo, hi: next})
		lo = next
	}
}

// readRange folds the streams of r, in tx, into a new fold. A range that is
// not the whole log is read through the (stream_id, version) index, whose
// bitmap visits the heap in order: ids are UUIDv7, so one range's events
// sit together in the heap and the ranges together read it about once.
func readRange(ctx context.Context, tx pgx.Tx, r streamRange, p *phase) (*fold, error) {
	f := newFold()
	var args []any
	where := r.where("stream_id", &args)
	if !r.whole() {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			return nil, err
		}
	}
	if err := readEvents(ctx, tx, f, where, args, p); err != nil {
		return nil, err
	}
	return f, nil
}
