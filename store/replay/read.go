package replay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// Progress says how far a run is. Rate is per second over the phase so far.
type Progress struct {
	Phase   string // ranges, read, write, index, catch-up, swap
	Done    int64  // events folded in read and catch-up, rows in write
	Total   int64  // 0 when unknown
	Elapsed time.Duration
	Rate    float64
}

// ProgressFunc receives progress; it is called from the goroutine that
// called Verify or Rebuild, at most every progressEvery events and at each
// phase's end.
type ProgressFunc func(Progress)

const progressEvery = 16384

// phase tracks one phase for progress reports.
type phase struct {
	name  string
	total int64
	base  int64 // done before the current part (a range of streams)
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
	done += p.base
	el := time.Since(p.start)
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el.Seconds()
	}
	p.fn(Progress{Phase: p.name, Done: done, Total: p.total, Elapsed: el, Rate: rate})
}

// readEvents streams the events selected by where (a condition on
// task_events, with args) into f. Memory holds the fold and a few batches
// in flight, never the log.
//
// There is no ORDER BY: a sequential scan costs the server a third less
// than walking the primary key, and fold puts each stream back in version
// order (heap order is seq order but for the rare insert that lands on an
// earlier page). synchronize_seqscans is off so the scan starts at the
// first page instead of joining another scan midway, which would hold back
// every stream that crosses its starting point.
//
// Decoding the JSON is most of the client's work, so it runs on every
// core: one goroutine reads the rows (binary, copied into batches), decoders
// turn batches into envelopes, and the calling goroutine folds the batches
// in the order they were read. All of them end before readEvents returns.
func readEvents(ctx context.Context, tx pgx.Tx, f *fold, where string, args []any, p *phase) error {
	if _, err := tx.Exec(ctx, `SET LOCAL synchronize_seqscans = off`); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	formats := make(pgx.QueryResultFormats, eventFields)
	for i := range formats {
		formats[i] = pgx.BinaryFormatCode
	}
	rows, err := tx.Query(ctx, `SELECT seq, stream_type, stream_id, version, type, schema_version, data, meta, occurred_at
		FROM task_events WHERE `+where, append([]any{formats}, args...)...)
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}

	workers := min(max(runtime.GOMAXPROCS(0), 1), 8)
	raw := make(chan *rawBatch, 2*workers)
	decoded := make(chan *decodedBatch, 2*workers)
	errs := make(chan error, workers+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(raw)
		defer rows.Close()
		errs <- readBatches(ctx, rows, raw)
	})
	var decoders sync.WaitGroup
	for range workers {
		decoders.Go(func() { errs <- decodeBatches(ctx, raw, decoded) })
	}
	wg.Go(func() {
		decoders.Wait()
		close(decoded)
	})

	foldErr := foldBatches(f, decoded, p)
	cancel() // after an error, stop the others; after success it changes nothing
	for range decoded {
	}
	wg.Wait()
	close(errs)
	// A reader's or decoder's error explains a fold that ran short.
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	if foldErr != nil {
		return foldErr
	}
	if err := parent.Err(); err != nil {
		return err
	}
	return f.finish()
}

const (
	eventFields = 9
	batchRows   = 512
)

// rawBatch is rows copied out of pgx's buffer: field j of row i is
// buf[ends[i*eventFields+j-1]:ends[i*eventFields+j]].
type rawBatch struct {
	n    int
	buf  []byte
	ends []int
}

func (b *rawBatch) field(i, j int) []byte {
	k := i*eventFields + j
	start := 0
	if k > 0 {
		start = b.ends[k-1]
	}
	return b.buf[start:b.ends[k]]
}

type decodedBatch struct {
	n    int
	evs  []events.Envelope
	keys []key
}

// readBatches copies rows into batches numbered in read order.
func readBatches(ctx context.Context, rows pgx.Rows, out chan<- *rawBatch) error {
	b := &rawBatch{}
	for rows.Next() {
		for _, v := range rows.RawValues() {
			b.buf = append(b.buf, v...)
			b.ends = append(b.ends, len(b.buf))
		}
		if len(b.ends) == batchRows*eventFields {
			select {
			case out <- b:
			case <-ctx.Done():
				return ctx.Err()
			}
			b = &rawBatch{n: b.n + 1, buf: make([]byte, 0, len(b.buf)), ends: make([]int, 0, cap(b.ends))}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	if len(b.ends) > 0 {
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// decodeBatches turns raw batches into envelopes.
func decodeBatches(ctx context.Context, in <-chan *rawBatch, out chan<- *decodedBatch) error {
	types := interner{}
	var row [eventFields][]byte
	for b := range in {
		rowsIn := len(b.ends) / eventFields
		d := &decodedBatch{n: b.n, evs: make([]events.Envelope, rowsIn), keys: make([]key, rowsIn)}
		for i := range rowsIn {
			for j := range eventFields {
				row[j] = b.field(i, j)
			}
			e, k, meta, err := decodeRow(row[:], types)
			if err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			if knownStream(e.StreamType) { // other streams are counted and skipped by the fold
				if projections.ReadsMeta(e.Type) {
					if err := json.Unmarshal(meta, &e.Meta); err != nil {
						return fmt.Errorf("read event %d: meta: %w", e.Seq, err)
					}
				}
				if err := e.Decode(); err != nil {
					return err
				}
			}
			e.Data = nil // it points into the batch buffer; the fold keeps envelopes it holds
			d.evs[i], d.keys[i] = e, k
		}
		select {
		case out <- d:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// foldBatches folds decoded batches in the order they were read.
func foldBatches(f *fold, in <-chan *decodedBatch, p *phase) error {
	waiting := map[int]*decodedBatch{}
	next := 0
	var done int64
	for d := range in {
		waiting[d.n] = d
		for d, ok := waiting[next]; ok; d, ok = waiting[next] {
			delete(waiting, next)
			next++
			for i := range d.evs {
				if err := f.apply(d.evs[i], d.keys[i]); err != nil {
					return err
				}
				done++
				if p != nil && done%progressEvery == 0 {
					p.report(done)
				}
			}
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("read events: batch %d never came", next)
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
