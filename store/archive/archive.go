// Package archive writes the event log's periods to the task-data store as
// gzipped JSON lines, one object per period with a manifest, and reads them
// back (ADR 035). Compaction deletes only events that an archive written
// here holds and has read back.
package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/store/blob"
)

// Period kinds (the setting EVENT_PARTITION).
const (
	Day  = "day"
	Week = "week"
)

// ParseKind checks an EVENT_PARTITION value.
func ParseKind(s string) (string, error) {
	switch s {
	case Day, Week:
		return s, nil
	}
	return "", fmt.Errorf("want day or week, not %q", s)
}

// Period is a UTC day, or a UTC ISO week from its Monday.
type Period struct {
	Kind  string
	Start time.Time
}

// PeriodOf is the period of kind that holds t.
func PeriodOf(kind string, t time.Time) Period {
	d := t.UTC().Truncate(24 * time.Hour)
	if kind == Week {
		d = d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
	}
	return Period{Kind: kind, Start: d}
}

// End is the start of the next period.
func (p Period) End() time.Time {
	if p.Kind == Week {
		return p.Start.AddDate(0, 0, 7)
	}
	return p.Start.AddDate(0, 0, 1)
}

// Next is the period after p.
func (p Period) Next() Period { return Period{Kind: p.Kind, Start: p.End()} }

func (p Period) String() string { return p.Kind + "/" + p.Start.Format(time.DateOnly) }

// Key is the object's key: events/day/2026-11-20.jsonl.gz.
func (p Period) Key() string { return "events/" + p.String() + ".jsonl.gz" }

// ManifestKey is the manifest's key: events/day/2026-11-20.manifest.json.
func (p Period) ManifestKey() string { return "events/" + p.String() + ".manifest.json" }

// ParsePeriod reads a period as String writes it (day/2026-11-20) or a
// bare date (a day, or a week's Monday, of kind).
func ParsePeriod(kind, s string) (Period, error) {
	if k, date, ok := strings.Cut(s, "/"); ok {
		kind, s = k, date
	}
	if _, err := ParseKind(kind); err != nil {
		return Period{}, err
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Period{}, fmt.Errorf("period %q: want a date such as 2026-11-20", s)
	}
	p := PeriodOf(kind, d)
	if !p.Start.Equal(d) {
		return Period{}, fmt.Errorf("period %q: a week starts on a Monday (%s)", s, p.Start.Format(time.DateOnly))
	}
	return p, nil
}

// Manifest describes one archive object. SHA256 and Bytes are the gzipped
// object's; Events its lines. SeqLo, SeqHi and Snapshot say which events it
// read: those of the period with seq in [SeqLo, SeqHi] visible in Snapshot.
type Manifest struct {
	Period     string    `json:"period"`
	Start      string    `json:"start"`
	Object     string    `json:"object"`
	Format     string    `json:"format"`
	Events     int64     `json:"events"`
	Bytes      int64     `json:"bytes"`
	SHA256     string    `json:"sha256"`
	FirstSeq   int64     `json:"first_seq,omitempty"`
	LastSeq    int64     `json:"last_seq,omitempty"`
	SeqLo      int64     `json:"seq_lo"`
	SeqHi      int64     `json:"seq_hi"`
	Snapshot   string    `json:"snapshot"`
	ArchivedAt time.Time `json:"archived_at"`
}

// Format names the object's encoding in the manifest.
const Format = "jsonl.gz"

// Line is one archived event: a task_events row.
type Line struct {
	Seq           int64           `json:"seq"`
	TxID          int64           `json:"tx_id"`
	StreamType    string          `json:"stream_type"`
	StreamID      string          `json:"stream_id"`
	Version       int             `json:"version"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
	Meta          json.RawMessage `json:"meta"`
	OccurredAt    time.Time       `json:"occurred_at"`
}

// Skew bounds how far an event's occurred_at may lag behind the seq order
// of the log (a command's time is taken before its insert). The archive of
// a period reads the seqs of [start-Skew, end+Skew): an event outside them
// is not in the object, its row in event_archives says so, and compaction
// leaves its task alone.
const Skew = time.Hour

// Margin is how long after a period's end it is archived: an event stamped
// in the period may commit that much later.
const Margin = time.Hour

// ErrMismatch: an archive object does not match its manifest.
var ErrMismatch = errors.New("archive does not match its manifest")

// Config configures Run.
type Config struct {
	Pool  *pgxpool.Pool
	Store blob.Store
	Kind  string
	// Before: periods that end at or before it are archived.
	Before time.Time
	// Max bounds the periods one call writes (0: no bound).
	Max int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Rest: after each period, wait as long as it took (the service's
	// rounds), so the archive holds a connection half the time at most.
	Rest bool
}

// Report says what Run did.
type Report struct {
	Periods int   `json:"periods"`
	Events  int64 `json:"events"`
	Bytes   int64 `json:"bytes"`
	// Pending: periods left for the next call (Max reached).
	Pending bool `json:"pending"`
}

// Run archives every period of cfg.Kind that ends at or before
// cfg.Before (and Margin ago) and has no archive yet, oldest first, from
// the period of the oldest event in the log.
func Run(ctx context.Context, cfg Config) (Report, error) {
	var rep Report
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	limit := cfg.Now().Add(-Margin)
	if cfg.Before.After(limit) || cfg.Before.IsZero() {
		cfg.Before = limit
	}
	var oldest *time.Time
	if err := cfg.Pool.QueryRow(ctx, `SELECT occurred_at FROM task_events ORDER BY seq LIMIT 1`).Scan(&oldest); err != nil &&
		!errors.Is(err, pgx.ErrNoRows) {
		return rep, fmt.Errorf("archive: %w", err)
	}
	if oldest == nil {
		return rep, nil
	}
	// The first archived period may precede the oldest event left (a
	// compacted log): start after the last archive when there is one.
	var last *time.Time
	if err := cfg.Pool.QueryRow(ctx, `SELECT max(period_start)::timestamptz FROM event_archives WHERE period = $1`, cfg.Kind).
		Scan(&last); err != nil {
		return rep, fmt.Errorf("archive: %w", err)
	}
	p := PeriodOf(cfg.Kind, oldest.Add(-Skew))
	if last != nil && !last.Before(p.Start) {
		p = PeriodOf(cfg.Kind, *last).Next()
	}
	for ; !p.End().After(cfg.Before); p = p.Next() {
		if cfg.Max > 0 && rep.Periods >= cfg.Max {
			rep.Pending = true
			break
		}
		began := time.Now()
		m, err := archivePeriod(ctx, cfg, p)
		if err != nil {
			return rep, err
		}
		rep.Periods++
		rep.Events += m.Events
		rep.Bytes += m.Bytes
		if cfg.Rest {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(time.Since(began)):
			}
		}
	}
	return rep, nil
}

// archivePeriod writes p's object and manifest, reads them back, and
// records the archive. An object with a manifest but no row (a crash
// between them) is checked and adopted, never written again.
func archivePeriod(ctx context.Context, cfg Config, p Period) (Manifest, error) {
	var have bool
	if err := cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_archives WHERE period = $1 AND period_start = $2)`,
		p.Kind, p.Start).Scan(&have); err != nil {
		return Manifest{}, fmt.Errorf("archive %s: %w", p, err)
	}
	if have {
		return Manifest{}, nil
	}
	m, err := ReadManifest(ctx, cfg.Store, p)
	switch {
	case err == nil:
		// Written before, not recorded: it must still check out.
		if _, err := Verify(ctx, cfg.Store, p); err != nil {
			return Manifest{}, fmt.Errorf("archive %s: the object is there but does not check out, so it is left as it is: %w", p, err)
		}
	case errors.Is(err, blob.ErrNotFound):
		if m, err = write(ctx, cfg, p); err != nil {
			return Manifest{}, fmt.Errorf("archive %s: %w", p, err)
		}
		if _, err := Verify(ctx, cfg.Store, p); err != nil {
			return Manifest{}, fmt.Errorf("archive %s: read back: %w", p, err)
		}
	default:
		return Manifest{}, fmt.Errorf("archive %s: %w", p, err)
	}
	_, err = cfg.Pool.Exec(ctx, `INSERT INTO event_archives
		(period, period_start, object_key, events, bytes, sha256, seq_lo, seq_hi, snapshot, archived_at, verified_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::pg_snapshot, $10, now()) ON CONFLICT DO NOTHING`,
		p.Kind, p.Start, m.Object, m.Events, m.Bytes, m.SHA256, m.SeqLo, m.SeqHi, m.Snapshot, m.ArchivedAt)
	if err != nil {
		return Manifest{}, fmt.Errorf("archive %s: record: %w", p, err)
	}
	return m, nil
}

// write streams p's events into its object, then writes the manifest.
func write(ctx context.Context, cfg Config, p Period) (Manifest, error) {
	m := Manifest{Period: p.Kind, Start: p.Start.Format(time.DateOnly), Object: p.Key(), Format: Format,
		ArchivedAt: cfg.Now().UTC().Truncate(time.Microsecond)}
	tx, err := cfg.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return m, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL TimeZone = 'UTC'`); err != nil {
		return m, err
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&m.Snapshot); err != nil {
		return m, err
	}
	if m.SeqLo, err = firstSeqAt(ctx, tx, p.Start.Add(-Skew)); err != nil {
		return m, err
	}
	hiNext, err := firstSeqAt(ctx, tx, p.End().Add(Skew))
	if err != nil {
		return m, err
	}
	m.SeqHi = hiNext - 1
	rows, err := tx.Query(ctx, `SELECT seq, json_build_object('seq', seq, 'tx_id', tx_id::text::bigint, 'stream_type', stream_type,
		'stream_id', stream_id, 'version', version, 'type', type, 'schema_version', schema_version, 'data', data, 'meta', meta,
		'occurred_at', occurred_at)::text
		FROM task_events WHERE seq BETWEEN $1 AND $2 AND occurred_at >= $3 AND occurred_at < $4 ORDER BY seq`,
		m.SeqLo, m.SeqHi, p.Start, p.End())
	if err != nil {
		return m, err
	}
	defer rows.Close()
	w, err := cfg.Store.Create(ctx, p.Key(), "application/gzip")
	if err != nil {
		return m, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = w.Abort(context.WithoutCancel(ctx))
		}
	}()
	h := sha256.New()
	cw := &counter{w: io.MultiWriter(w, h)}
	gz, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	bw := bufio.NewWriterSize(gz, 256<<10)
	var seq int64
	var line []byte
	for rows.Next() {
		if err := rows.Scan(&seq, &line); err != nil {
			return m, err
		}
		if m.FirstSeq == 0 {
			m.FirstSeq = seq
		}
		m.LastSeq = seq
		m.Events++
		bw.Write(line)
		bw.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return m, err
	}
	if err := bw.Flush(); err != nil {
		return m, err
	}
	if err := gz.Close(); err != nil {
		return m, err
	}
	if cw.err != nil {
		return m, cw.err
	}
	if err := w.Commit(ctx); err != nil {
		return m, err
	}
	committed = true
	m.Bytes, m.SHA256 = cw.n, hex.EncodeToString(h.Sum(nil))
	body, _ := json.MarshalIndent(m, "", "  ")
	mw, err := cfg.Store.Create(ctx, p.ManifestKey(), "application/json")
	if err != nil {
		return m, err
	}
	if _, err := mw.Write(append(body, '\n')); err != nil {
		_ = mw.Abort(context.WithoutCancel(ctx))
		return m, err
	}
	return m, mw.Commit(ctx)
}

// firstSeqAt is the first seq whose event occurred at or after t, found by
// bisecting the primary key (occurred_at follows seq, within Skew); one
// past the last seq when none did.
func firstSeqAt(ctx context.Context, tx pgx.Tx, t time.Time) (int64, error) {
	var lo, hi *int64
	if err := tx.QueryRow(ctx, `SELECT min(seq), max(seq) FROM task_events`).Scan(&lo, &hi); err != nil {
		return 0, err
	}
	if lo == nil {
		return 1, nil
	}
	a, b := *lo, *hi+1 // the answer is in [a, b]
	for a < b {
		mid := a + (b-a)/2
		var seq int64
		var at time.Time
		err := tx.QueryRow(ctx, `SELECT seq, occurred_at FROM task_events WHERE seq >= $1 ORDER BY seq LIMIT 1`, mid).Scan(&seq, &at)
		if err != nil {
			return 0, err
		}
		if at.Before(t) {
			a = seq + 1
		} else {
			b = mid
		}
	}
	return a, nil
}

type counter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// ReadManifest reads p's manifest; blob.ErrNotFound when there is none.
func ReadManifest(ctx context.Context, bs blob.Store, p Period) (Manifest, error) {
	var m Manifest
	r, err := bs.Open(ctx, p.ManifestKey())
	if err != nil {
		return m, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: not a manifest: %w", p.ManifestKey(), err)
	}
	return m, nil
}

// Verify reads p's object back and checks it against its manifest: the
// SHA-256 and size of the bytes, and the number of events, each one a JSON
// object of the period. A mismatch is ErrMismatch, saying what differs.
func Verify(ctx context.Context, bs blob.Store, p Period) (Manifest, error) {
	return Read(ctx, bs, p, nil)
}

// Read verifies p's object as Verify does and hands each event to fn (when
// not nil) as it goes; an error from fn stops it. The caller must not
// trust what fn saw until Read returns nil: the hash is known at the end.
func Read(ctx context.Context, bs blob.Store, p Period, fn func(Line) error) (Manifest, error) {
	m, err := ReadManifest(ctx, bs, p)
	if err != nil {
		return m, fmt.Errorf("%s: %w", p.ManifestKey(), err)
	}
	r, err := bs.Open(ctx, p.Key())
	if err != nil {
		return m, fmt.Errorf("%s: %w", p.Key(), err)
	}
	defer r.Close()
	h := sha256.New()
	cr := &counter{w: h}
	gz, err := gzip.NewReader(io.TeeReader(r, cr))
	if err != nil {
		return m, fmt.Errorf("%s: %w: not gzip: %v", p.Key(), ErrMismatch, err)
	}
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var n int64
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return m, fmt.Errorf("%s: %w: line %d is not an event: %v", p.Key(), ErrMismatch, n+1, err)
		}
		if l.OccurredAt.Before(p.Start) || !l.OccurredAt.Before(p.End()) {
			return m, fmt.Errorf("%s: %w: line %d (seq %d) occurred at %s, outside the period", p.Key(), ErrMismatch, n+1, l.Seq,
				l.OccurredAt.Format(time.RFC3339Nano))
		}
		n++
		if fn != nil {
			if err := fn(l); err != nil {
				return m, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("%s: %w: %v", p.Key(), ErrMismatch, err)
	}
	// Drain what gzip left unread, so the hash covers every byte.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, cr)); err != nil {
		return m, fmt.Errorf("%s: %w", p.Key(), err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	var diffs []string
	if sum != m.SHA256 {
		diffs = append(diffs, fmt.Sprintf("sha256 is %s, the manifest says %s", sum, m.SHA256))
	}
	if cr.n != m.Bytes {
		diffs = append(diffs, fmt.Sprintf("it has %d bytes, the manifest says %d", cr.n, m.Bytes))
	}
	if n != m.Events {
		diffs = append(diffs, fmt.Sprintf("it holds %d events, the manifest says %d", n, m.Events))
	}
	if len(diffs) > 0 {
		return m, fmt.Errorf("%s: %w: %s", p.Key(), ErrMismatch, strings.Join(diffs, "; "))
	}
	return m, nil
}

// List returns the periods of kind that have a manifest in the store,
// oldest first.
func List(ctx context.Context, bs blob.Store, kind string) ([]Period, error) {
	var out []Period
	prefix := "events/" + kind + "/"
	err := bs.List(ctx, prefix, func(info blob.Info) error {
		name, ok := strings.CutSuffix(strings.TrimPrefix(info.Key, prefix), ".manifest.json")
		if !ok {
			return nil
		}
		p, err := ParsePeriod(kind, name)
		if err != nil {
			return nil // not ours
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Period) int { return a.Start.Compare(b.Start) })
	return out, nil
}
