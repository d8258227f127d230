package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Progress says how far a run is. Rate is per second over the phase so far.
type Progress struct {
	Phase   string // read, write, index, diff, catch-up, swap
	Done    int64  // events folded in read and catch-up, rows in write
	Total   int64  // 0 when unknown
	Elapsed time.Duration
	Rate    float64
}

// ProgressFunc receives progress; it is called from the running goroutine,
// at most every progressEvery events and at each phase's end.
type ProgressFunc func(Progress)

const progressEvery = 16384

// phase tracks one phase for progress reports.
type phase struct {
	name  string
	total int64
	start time.Time
	fn    ProgressFunc
}

func startPhase(fn ProgressFunc, name string, total int64) *phase {
	p := &phase{name: name, total: total, start: time.Now(), fn: fn}
	p.report(0)
	return p
}

func (p *phase) report(done int64) {
	if p.fn == nil {
		return
	}
	el := time.Since(p.start)
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el.Seconds()
	}
	p.fn(Progress{Phase: p.name, Done: done, Total: p.total, Elapsed: el, Rate: rate})
}

// readEvents streams the events selected by where (a condition on
// task_events, with args) in seq order into f. Rows are decoded one at a
// time as they arrive: memory holds the fold, never the log.
//
// Seq order is stream order: a stream's next version is written only after
// its previous version committed, so it always draws a higher seq; fold
// checks it anyway.
func readEvents(ctx context.Context, tx pgx.Tx, f *fold, where string, args []any, p *phase) error {
	rows, err := tx.Query(ctx, `SELECT seq, stream_type, stream_id, version, type, schema_version, data, meta, occurred_at
		FROM task_events WHERE `+where+` ORDER BY seq`, args...)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var done int64
	var meta []byte
	for rows.Next() {
		var e events.Envelope
		if err := rows.Scan(&e.Seq, &e.StreamType, &e.StreamID, &e.Version, &e.Type, &e.SchemaVersion,
			&e.Data, &meta, &e.OccurredAt); err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if err := json.Unmarshal(meta, &e.Meta); err != nil {
			return fmt.Errorf("read event %d: meta: %w", e.Seq, err)
		}
		e.OccurredAt = e.OccurredAt.UTC()
		if knownStream(e.StreamType) { // other streams are counted and skipped by apply
			if err := e.Decode(); err != nil {
				return err
			}
		}
		if err := f.apply(e); err != nil {
			return err
		}
		done++
		if p != nil && done%progressEvery == 0 {
			p.report(done)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	if p != nil {
		p.report(done)
	}
	return nil
}

func knownStream(t string) bool {
	return t == events.StreamTask || t == events.StreamTaskType || t == events.StreamUser
}
