package replay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
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
// task_events, with args) into f. Rows are decoded one at a time as they
// arrive: memory holds the fold, never the log.
//
// There is no ORDER BY: a sequential scan costs the server a third less
// than walking the primary key, and fold puts each stream back in version
// order (heap order is seq order but for the rare insert that lands on an
// earlier page). synchronize_seqscans is off so the scan starts at the
// first page instead of joining another scan midway, which would hold back
// every stream that crosses its starting point.
//
// Rows are read in binary and decoded by hand: at a million events the
// generic scan's allocations and JSON validation cost more than the fold.
func readEvents(ctx context.Context, tx pgx.Tx, f *fold, where string, args []any, p *phase) error {
	formats := pgx.QueryResultFormats{pgx.BinaryFormatCode, pgx.BinaryFormatCode, pgx.BinaryFormatCode,
		pgx.BinaryFormatCode, pgx.BinaryFormatCode, pgx.BinaryFormatCode, pgx.BinaryFormatCode,
		pgx.BinaryFormatCode, pgx.BinaryFormatCode}
	if _, err := tx.Exec(ctx, `SET LOCAL synchronize_seqscans = off`); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT seq, stream_type, stream_id, version, type, schema_version, data, meta, occurred_at
		FROM task_events WHERE `+where, append([]any{formats}, args...)...)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var done int64
	types := interner{}
	for rows.Next() {
		e, k, meta, err := decodeRow(rows.RawValues(), types)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if knownStream(e.StreamType) { // other streams are counted and skipped by apply
			if projections.ReadsMeta(e.Type) {
				if err := json.Unmarshal(meta, &e.Meta); err != nil {
					return fmt.Errorf("read event %d: meta: %w", e.Seq, err)
				}
			}
			if err := e.Decode(); err != nil {
				return err
			}
		}
		e.Data = nil // it points into the row buffer, which the next row reuses; fold may hold e
		if err := f.apply(e, k); err != nil {
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
	if err := f.finish(); err != nil {
		return err
	}
	if p != nil {
		p.report(done)
	}
	return nil
}

// interner shares one string per distinct stream or event type name, so a
// million events do not allocate a million copies of a few dozen values.
type interner map[string]string

func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	in[s] = s
	return s
}

// pgEpoch is where PostgreSQL's binary timestamps count from.
var pgEpochUnix = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

// decodeRow decodes one binary row of the SELECT in readEvents: the
// envelope without its StreamID (fold fills it), the stream's key and the
// meta JSON. Data and meta point into the row buffer.
func decodeRow(v [][]byte, in interner) (events.Envelope, key, []byte, error) {
	var e events.Envelope
	var k key
	if len(v) != 9 || len(v[0]) != 8 || len(v[2]) != 16 || len(v[3]) != 4 || len(v[5]) != 4 || len(v[8]) != 8 ||
		len(v[6]) < 1 || v[6][0] != 1 || len(v[7]) < 1 || v[7][0] != 1 {
		return e, k, nil, errors.New("unexpected row layout")
	}
	e.Seq = int64(binary.BigEndian.Uint64(v[0]))
	e.StreamType = in.get(v[1])
	copy(k[:], v[2])
	e.Version = int(int32(binary.BigEndian.Uint32(v[3])))
	e.Type = in.get(v[4])
	e.SchemaVersion = int(int32(binary.BigEndian.Uint32(v[5])))
	e.Data = v[6][1:] // jsonb's binary form is a version byte and the text
	us := int64(binary.BigEndian.Uint64(v[8]))
	sec, rem := us/1_000_000, us%1_000_000
	if rem < 0 {
		sec, rem = sec-1, rem+1_000_000
	}
	e.OccurredAt = time.Unix(pgEpochUnix+sec, rem*1000).UTC()
	return e, k, v[7][1:], nil
}
