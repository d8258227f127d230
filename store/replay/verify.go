package replay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Side says where a differing row is.
type Side string

const (
	// LiveOnly: the live table has a row the events do not produce.
	LiveOnly Side = "live_only"
	// EventsOnly: the events produce a row the live table lacks.
	EventsOnly Side = "events_only"
	// Changed: both have the row, with different values.
	Changed Side = "changed"
)

// Difference is one row on which a live table and the fold of the events
// disagree. Values are PostgreSQL's text forms, nil for NULL.
type Difference struct {
	Table   string    `json:"table"`
	Key     string    `json:"key"`
	Side    Side      `json:"side"`
	Columns []string  `json:"columns"`
	Live    []*string `json:"live,omitempty"`   // nil when the row is not live
	Events  []*string `json:"events,omitempty"` // nil when the events have no such row
	Changed []string  `json:"changed,omitempty"`
}

// TableDiff counts a table's differing rows by side of the EXCEPT.
type TableDiff struct {
	Rows     int64 `json:"rows"`      // rows folded from the events
	LiveRows int64 `json:"live_rows"` // live rows not produced by the events
	FoldRows int64 `json:"fold_rows"` // folded rows not in the live table
}

// Report is the outcome of Verify.
type Report struct {
	Events      int64                `json:"events"`
	Skipped     int64                `json:"skipped"` // events of streams no projection reads
	Tables      map[string]TableDiff `json:"tables"`
	Differences []Difference         `json:"differences"`
	Truncated   bool                 `json:"truncated"` // more differences than MaxDifferences
	Elapsed     time.Duration        `json:"elapsed"`
}

// Clean reports whether every live table equals the fold of the events.
func (r *Report) Clean() bool {
	for _, t := range r.Tables {
		if t.LiveRows > 0 || t.FoldRows > 0 {
			return false
		}
	}
	return true
}

// VerifyConfig configures Verify.
type VerifyConfig struct {
	Progress ProgressFunc
	// MaxDifferences bounds the rows kept per table and side (default 100);
	// the counts in Report.Tables are always complete.
	MaxDifferences int
}

// Verify folds the whole log and diffs the result both ways against the
// live tables, all in one REPEATABLE READ READ ONLY transaction, so events
// and tables are read at the same instant while writers go on. It runs on a
// connection of its own (the temporary tables die with it).
//
// The temporary tables are written only after the fold is complete: writing
// gives the transaction an xid, and an open xid holds back every consumer's
// horizon (DESIGN §2), so the window is the COPY and the diff, not the read.
func Verify(ctx context.Context, pool *pgxpool.Pool, cfg VerifyConfig) (*Report, error) {
	if cfg.MaxDifferences <= 0 {
		cfg.MaxDifferences = 100
	}
	start := time.Now()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("verify: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// Session settings and temporary tables come first: neither may happen
	// inside a read-only transaction.
	for _, s := range []string{`SET temp_buffers = '256MB'`, `SET work_mem = '128MB'`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("verify: %s: %w", s, err)
		}
	}
	ts := tables()
	for _, t := range ts {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE %s AS SELECT %s FROM %s WITH NO DATA`,
			tempName(t), quoteIdents(t.columns), pgx.Identifier{t.name}.Sanitize())); err != nil {
			return nil, fmt.Errorf("verify: create temporary %s: %w", t.name, err)
		}
	}

	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("verify: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var total int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM task_events`).Scan(&total); err != nil {
		return nil, fmt.Errorf("verify: count events: %w", err)
	}
	f := newFold(nil)
	if err := readEvents(ctx, tx, f, "true", nil, startPhase(cfg.Progress, "read", total)); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep := &Report{Events: f.events, Skipped: f.skipped, Tables: map[string]TableDiff{}}

	written, err := writeFold(ctx, tx, ts, f, cfg.Progress, func(t table) pgx.Identifier { return pgx.Identifier{tempName(t)} })
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	f.dropRows()

	p := startPhase(cfg.Progress, "diff", int64(len(ts)))
	for i, t := range ts {
		td, diffs, truncated, err := diffTable(ctx, tx, t, cfg.MaxDifferences)
		if err != nil {
			return nil, fmt.Errorf("verify: diff %s: %w", t.name, err)
		}
		td.Rows = written[t.name]
		rep.Tables[t.name] = td
		rep.Differences = append(rep.Differences, diffs...)
		rep.Truncated = rep.Truncated || truncated
		p.report(int64(i + 1))
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func tempName(t table) string { return "replay_" + t.name }

// writeFold copies every table's rows of f into the tables named by into
// and returns how many rows each got.
func writeFold(ctx context.Context, tx pgx.Tx, ts []table, f *fold, progress ProgressFunc, into func(table) pgx.Identifier) (map[string]int64, error) {
	written := map[string]int64{}
	var total int64
	for _, t := range ts {
		n, _ := t.rows(f)
		total += int64(n)
	}
	p := startPhase(progress, "write", total)
	var done int64
	for _, t := range ts {
		n, err := copyRows(ctx, tx, into(t), t, f)
		if err != nil {
			return nil, err
		}
		written[t.name] = n
		done += n
		p.report(done)
	}
	return written, nil
}

// diffTable runs the EXCEPT both ways between the live table and the
// temporary one and pairs the rows that share a key.
func diffTable(ctx context.Context, tx pgx.Tx, t table, max int) (TableDiff, []Difference, bool, error) {
	var td TableDiff
	live := pgx.Identifier{t.name}.Sanitize()
	folded := pgx.Identifier{tempName(t)}.Sanitize()
	liveRows, nLive, err := exceptRows(ctx, tx, t, live, folded, max)
	if err != nil {
		return td, nil, false, err
	}
	foldRows, nFold, err := exceptRows(ctx, tx, t, folded, live, max)
	if err != nil {
		return td, nil, false, err
	}
	td.LiveRows, td.FoldRows = nLive, nFold
	truncated := nLive > int64(len(liveRows)) || nFold > int64(len(foldRows))

	var out []Difference
	byKey := map[string]int{}
	for _, r := range liveRows {
		k := keyOf(t, r)
		byKey[k] = len(out)
		out = append(out, Difference{Table: t.name, Key: k, Side: LiveOnly, Columns: t.columns, Live: r})
	}
	for _, r := range foldRows {
		k := keyOf(t, r)
		if i, ok := byKey[k]; ok {
			d := &out[i]
			d.Side, d.Events = Changed, r
			for c := range t.columns {
				if !sameValue(d.Live[c], r[c]) {
					d.Changed = append(d.Changed, t.columns[c])
				}
			}
			continue
		}
		out = append(out, Difference{Table: t.name, Key: k, Side: EventsOnly, Columns: t.columns, Events: r})
	}
	return td, out, truncated, nil
}

// exceptRows returns up to max rows of a EXCEPT b (as text, key order) and
// how many there are in all.
func exceptRows(ctx context.Context, tx pgx.Tx, t table, a, b string, max int) ([][]*string, int64, error) {
	cols := quoteIdents(t.columns)
	texts := make([]string, len(t.columns))
	for i, c := range t.columns {
		texts[i] = pgx.Identifier{c}.Sanitize() + "::text"
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT %s FROM (SELECT %s FROM %s EXCEPT SELECT %s FROM %s) d ORDER BY %s`,
		strings.Join(texts, ", "), cols, a, cols, b, quoteIdents(t.key)))
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out [][]*string
	var n int64
	for rows.Next() {
		n++
		if len(out) >= max {
			continue
		}
		vals := make([]*string, len(t.columns))
		dest := make([]any, len(vals))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, 0, err
		}
		out = append(out, vals)
	}
	return out, n, rows.Err()
}

func keyOf(t table, vals []*string) string {
	parts := make([]string, 0, len(t.key))
	for _, k := range t.key {
		for i, c := range t.columns {
			if c == k {
				v := "NULL"
				if vals[i] != nil {
					v = *vals[i]
				}
				parts = append(parts, k+"="+v)
			}
		}
	}
	return strings.Join(parts, " ")
}

func sameValue(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
