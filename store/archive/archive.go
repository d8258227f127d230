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
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/store/advisory"
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

// Object is one archive object of a period: part 0 is the period's
// object, written once after the period ended; part N > 0 is the N-th
// supplement, written when events of the period committed after the
// objects before it had read the period (ADR 035), holding exactly those.
type Object struct {
	Period
	Part int
}

// Key is the object's key: events/day/2026-11-20.jsonl.gz, or
// events/day/2026-11-20.1.jsonl.gz for the first supplement.
func (o Object) Key() string {
	if o.Part == 0 {
		return o.Period.Key()
	}
	return fmt.Sprintf("events/%s.%d.jsonl.gz", o.Period, o.Part)
}

// ManifestKey is its manifest's key.
func (o Object) ManifestKey() string {
	if o.Part == 0 {
		return o.Period.ManifestKey()
	}
	return fmt.Sprintf("events/%s.%d.manifest.json", o.Period, o.Part)
}

func (o Object) String() string {
	if o.Part == 0 {
		return o.Period.String()
	}
	return fmt.Sprintf("%s.%d", o.Period, o.Part)
}

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
	Period string `json:"period"`
	Start  string `json:"start"`
	// Part: 0 for the period's object, N for its N-th supplement, which
	// holds the period's events in [SeqLo, SeqHi] visible in Snapshot that
	// no part before it holds.
	Part       int       `json:"part,omitempty"`
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
	// Share, when above 0, is the most of its time a run spends writing
	// periods (the service's, compaction's EVENT_COMPACTION_SHARE): after
	// each period it rests (1/Share - 1) times as long as the period took,
	// leaving the database and the cores to the readers.
	Share float64
}

// Report says what Run did.
type Report struct {
	Periods int   `json:"periods"`
	Events  int64 `json:"events"`
	Bytes   int64 `json:"bytes"`
	// Pending: periods left for the next call (Max reached).
	Pending bool `json:"pending"`
	// Supplements: supplementary objects written for events that
	// committed after their period was archived; their events are in
	// Events and Bytes too.
	Supplements int `json:"supplements"`
	// Skipped: another instance was archiving.
	Skipped bool `json:"skipped"`
}

// LockKey is the advisory lock an archive run holds: one instance writes
// the archive at a time, so an object is written once (a second writer
// would replace it, and the row the first recorded would describe
// another snapshot than the object's).
const LockKey = 7035_0003 // 7035_0001 is the schedule prune's, 7035_0002 compaction's

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
	_, release, locked, err := advisory.TryLock(ctx, cfg.Pool, LockKey)
	if err != nil {
		return rep, fmt.Errorf("archive: lock: %w", err)
	}
	if !locked {
		rep.Skipped = true
		return rep, nil
	}
	defer release()
	if err := supplements(ctx, cfg, &rep); err != nil {
		return rep, err
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
		m, err := archiveObject(ctx, cfg, Object{Period: p}, 0, 0)
		if err != nil {
			return rep, err
		}
		rep.Periods++
		rep.Events += m.Events
		rep.Bytes += m.Bytes
		if cfg.Share > 0 && cfg.Share < 1 {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(time.Duration(float64(time.Since(began)) * (1/cfg.Share - 1))):
			}
		}
	}
	return rep, nil
}

// supplements writes a supplementary object for each period in which
// compaction met events that no archive object of it holds
// (event_archive_late: events that committed after their period was
// archived, with the seqs compaction saw), so that their chains can be
// compacted too; for a period behind the archived ones that has no object
// at all, its object.
func supplements(ctx context.Context, cfg Config, rep *Report) error {
	rows, err := cfg.Pool.Query(ctx, `SELECT l.period_start::timestamptz, l.seq_lo, l.seq_hi,
		       (SELECT coalesce(max(a.part), -1) + 1 FROM event_archives a WHERE a.period = l.period AND a.period_start = l.period_start)
		  FROM event_archive_late l WHERE l.period = $1 ORDER BY l.period_start`, cfg.Kind)
	if err != nil {
		return fmt.Errorf("archive: late events: %w", err)
	}
	type late struct {
		o      Object
		lo, hi int64
	}
	var todo []late
	for rows.Next() {
		var l late
		var start time.Time
		if err := rows.Scan(&start, &l.lo, &l.hi, &l.o.Part); err != nil {
			rows.Close()
			return fmt.Errorf("archive: late events: %w", err)
		}
		l.o.Period = PeriodOf(cfg.Kind, start)
		todo = append(todo, l)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("archive: late events: %w", err)
	}
	for _, l := range todo {
		// Part 0: a period behind the ones archived that had no event
		// when they were (a writer's clock days behind): its object is
		// written as any period's, from the whole period.
		m, err := archiveObject(ctx, cfg, l.o, l.lo, l.hi)
		if err != nil {
			return err
		}
		if m.Events > 0 {
			rep.Supplements++
			rep.Events += m.Events
			rep.Bytes += m.Bytes
		}
		// Done with what compaction reported, unless it reported more
		// meanwhile (the next run writes the next part).
		if _, err := cfg.Pool.Exec(ctx, `DELETE FROM event_archive_late WHERE period = $1 AND period_start = $2
			AND seq_lo >= $3 AND seq_hi <= $4`, l.o.Kind, l.o.Start, l.lo, l.hi); err != nil {
			return fmt.Errorf("archive %s: %w", l.o, err)
		}
	}
	return nil
}

// archiveObject writes o and its manifest, reads them back, and records
// them. An object with a manifest but no row (a crash between them) is
// checked and adopted, never written again. Given seqs (hi > 0: late
// events), it reads those of the period from lo to hi that no earlier part
// holds, and an empty one is neither written nor recorded; else the whole
// period, found by bisecting the seqs on occurred_at.
func archiveObject(ctx context.Context, cfg Config, o Object, lo, hi int64) (Manifest, error) {
	var have bool
	if err := cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_archives WHERE period = $1 AND period_start = $2 AND part = $3)`,
		o.Kind, o.Start, o.Part).Scan(&have); err != nil {
		return Manifest{}, fmt.Errorf("archive %s: %w", o, err)
	}
	if have {
		return Manifest{}, nil
	}
	m, err := readManifest(ctx, cfg.Store, o)
	switch {
	case err == nil:
		// Written before, not recorded: it must still check out.
		if _, err := VerifyObject(ctx, cfg.Store, o); err != nil {
			return Manifest{}, fmt.Errorf("archive %s: the object is there but does not check out, so it is left as it is: %w", o, err)
		}
	case errors.Is(err, blob.ErrNotFound):
		if m, err = write(ctx, cfg, o, lo, hi); err != nil {
			return Manifest{}, fmt.Errorf("archive %s: %w", o, err)
		}
		if hi > 0 && m.Events == 0 {
			return m, nil
		}
		if _, err := VerifyObject(ctx, cfg.Store, o); err != nil {
			return Manifest{}, fmt.Errorf("archive %s: read back: %w", o, err)
		}
	default:
		return Manifest{}, fmt.Errorf("archive %s: %w", o, err)
	}
	_, err = cfg.Pool.Exec(ctx, `INSERT INTO event_archives
		(period, period_start, part, object_key, events, bytes, sha256, seq_lo, seq_hi, snapshot, archived_at, verified_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::pg_snapshot, $11, now()) ON CONFLICT DO NOTHING`,
		o.Kind, o.Start, o.Part, m.Object, m.Events, m.Bytes, m.SHA256, m.SeqLo, m.SeqHi, m.Snapshot, m.ArchivedAt)
	if err != nil {
		return Manifest{}, fmt.Errorf("archive %s: record: %w", o, err)
	}
	return m, nil
}

// supplementSQL reads a supplement's events: those of the period in
// [$1, $2] that no part before it holds (the test compaction makes, in
// store/compact.go).
const supplementSQL = ` AND NOT EXISTS (SELECT 1 FROM event_archives a WHERE a.period = $5 AND a.period_start = $3::date
		AND a.part < $6 AND e.seq BETWEEN a.seq_lo AND a.seq_hi AND pg_visible_in_snapshot(e.tx_id, a.snapshot))`

// write streams o's events into its object, then writes the manifest.
// Late events' seqs (hi > 0) with none to write write nothing.
func write(ctx context.Context, cfg Config, o Object, lo, hi int64) (Manifest, error) {
	p := o.Period
	m := Manifest{Period: p.Kind, Start: p.Start.Format(time.DateOnly), Part: o.Part, Object: o.Key(), Format: Format,
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
	query := `SELECT seq, json_build_object('seq', seq, 'tx_id', tx_id::text::bigint, 'stream_type', stream_type,
		'stream_id', stream_id, 'version', version, 'type', type, 'schema_version', schema_version, 'data', data, 'meta', meta,
		'occurred_at', occurred_at)::text
		FROM task_events e WHERE seq BETWEEN $1 AND $2 AND occurred_at >= $3 AND occurred_at < $4`
	args := []any{}
	if hi == 0 {
		if m.SeqLo, err = firstSeqAt(ctx, tx, p.Start.Add(-Skew)); err != nil {
			return m, err
		}
		hiNext, err := firstSeqAt(ctx, tx, p.End().Add(Skew))
		if err != nil {
			return m, err
		}
		m.SeqHi = hiNext - 1
		args = append(args, m.SeqLo, m.SeqHi, p.Start, p.End())
	} else {
		m.SeqLo, m.SeqHi = lo, hi
		query += supplementSQL
		args = append(args, m.SeqLo, m.SeqHi, p.Start, p.End(), p.Kind, o.Part)
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (`+query+`) s`, args...).Scan(&n); err != nil {
			return m, err
		}
		if n == 0 {
			return m, nil
		}
	}
	rows, err := tx.Query(ctx, query+` ORDER BY seq`, args...)
	if err != nil {
		return m, err
	}
	defer rows.Close()
	w, err := cfg.Store.Create(ctx, o.Key(), "application/gzip")
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
	mw, err := cfg.Store.Create(ctx, o.ManifestKey(), "application/json")
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
	return readManifest(ctx, bs, Object{Period: p})
}

func readManifest(ctx context.Context, bs blob.Store, o Object) (Manifest, error) {
	var m Manifest
	r, err := bs.Open(ctx, o.ManifestKey())
	if err != nil {
		return m, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: not a manifest: %w", o.ManifestKey(), err)
	}
	return m, nil
}

// Verify reads p's object back and checks it against its manifest: the
// SHA-256 and size of the bytes, and the number of events, each one a JSON
// object of the period. A mismatch is ErrMismatch, saying what differs.
func Verify(ctx context.Context, bs blob.Store, p Period) (Manifest, error) {
	return Read(ctx, bs, Object{Period: p}, nil)
}

// VerifyObject is Verify for any part of a period.
func VerifyObject(ctx context.Context, bs blob.Store, o Object) (Manifest, error) {
	return Read(ctx, bs, o, nil)
}

// Read verifies o as Verify does and hands each event to fn (when not
// nil) as it goes; an error from fn stops it. The caller must not trust
// what fn saw until Read returns nil: the hash is known at the end.
func Read(ctx context.Context, bs blob.Store, o Object, fn func(Line) error) (Manifest, error) {
	p := o.Period
	m, err := readManifest(ctx, bs, o)
	if err != nil {
		return m, fmt.Errorf("%s: %w", o.ManifestKey(), err)
	}
	r, err := bs.Open(ctx, o.Key())
	if err != nil {
		return m, fmt.Errorf("%s: %w", o.Key(), err)
	}
	defer r.Close()
	h := sha256.New()
	cr := &counter{w: h}
	gz, err := gzip.NewReader(io.TeeReader(r, cr))
	if err != nil {
		return m, fmt.Errorf("%s: %w: not gzip: %v", o.Key(), ErrMismatch, err)
	}
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var n int64
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return m, fmt.Errorf("%s: %w: line %d is not an event: %v", o.Key(), ErrMismatch, n+1, err)
		}
		if l.OccurredAt.Before(p.Start) || !l.OccurredAt.Before(p.End()) {
			return m, fmt.Errorf("%s: %w: line %d (seq %d) occurred at %s, outside the period", o.Key(), ErrMismatch, n+1, l.Seq,
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
		return m, fmt.Errorf("%s: %w: %v", o.Key(), ErrMismatch, err)
	}
	// Drain what gzip left unread, so the hash covers every byte.
	if _, err := io.Copy(io.Discard, io.TeeReader(r, cr)); err != nil {
		return m, fmt.Errorf("%s: %w", o.Key(), err)
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
	if m.Part != o.Part {
		diffs = append(diffs, fmt.Sprintf("the manifest says part %d", m.Part))
	}
	if len(diffs) > 0 {
		return m, fmt.Errorf("%s: %w: %s", o.Key(), ErrMismatch, strings.Join(diffs, "; "))
	}
	return m, nil
}

// List returns the objects of kind that have a manifest in the store,
// oldest period first, each period's parts in order.
func List(ctx context.Context, bs blob.Store, kind string) ([]Object, error) {
	var out []Object
	prefix := "events/" + kind + "/"
	err := bs.List(ctx, prefix, func(info blob.Info) error {
		name, ok := strings.CutSuffix(strings.TrimPrefix(info.Key, prefix), ".manifest.json")
		if !ok {
			return nil
		}
		date, part := name, 0
		if d, n, ok := strings.Cut(name, "."); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v <= 0 || strconv.Itoa(v) != n {
				return nil // not ours
			}
			date, part = d, v
		}
		p, err := ParsePeriod(kind, date)
		if err != nil {
			return nil // not ours
		}
		out = append(out, Object{Period: p, Part: part})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Object) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return a.Part - b.Part
	})
	return out, nil
}
