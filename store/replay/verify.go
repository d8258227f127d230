package replay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/projections"
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

// TableDiff counts a table's differing rows on each side: a changed row
// counts on both (as EXCEPT both ways would).
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
	Truncated   bool                 `json:"truncated"` // more differences in a table than MaxDifferences
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
	// MaxDifferences bounds the differences kept per table (default 100);
	// the counts in Report.Tables are always complete.
	MaxDifferences int
	// PartitionEvents bounds the events folded at once (default
	// DefaultPartitionEvents).
	PartitionEvents int
	// EventsSchema, when set, folds that schema's task_events instead of
	// the live log (ArchiveSchema: the archive plus the live log, after
	// LoadArchive); the projections compared are the live ones.
	EventsSchema string
}

// Verify folds the log and diffs the result both ways against the live
// tables, all in one REPEATABLE READ READ ONLY transaction, so events and
// tables are read at the same instant while writers go on.
//
// It folds one range of streams at a time (partition.go) and compares each
// range's rows with the live rows of the same streams in one query, the
// folded rows sent as arrays: memory is bounded by the range, and nothing
// is written, so the transaction never takes an xid and never holds back
// the consumers' horizon (DESIGN §2).
func Verify(ctx context.Context, pool *pgxpool.Pool, cfg VerifyConfig) (*Report, error) {
	if cfg.MaxDifferences <= 0 {
		cfg.MaxDifferences = 100
	}
	if cfg.PartitionEvents <= 0 {
		cfg.PartitionEvents = DefaultPartitionEvents
	}
	start := time.Now()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("verify: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := setSession(ctx, conn); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if cfg.EventsSchema != "" {
		if err := useEvents(ctx, conn, cfg.EventsSchema); err != nil {
			return nil, fmt.Errorf("verify: %w", err)
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
	cut := startPhase(cfg.Progress, "ranges", total)
	ranges, err := partitions(ctx, tx, total, cfg.PartitionEvents)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	cut.report(total)
	ts := tables()
	diffs := make([]*differ, len(ts))
	for i, t := range ts {
		if diffs[i], err = newDiffer(ctx, tx, t); err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
	}
	rep := &Report{Tables: map[string]TableDiff{}}
	kept := map[string]int{}
	var want counts
	wantPending := projections.PendingCounts{}
	read := startPhase(cfg.Progress, "read", total)
	for _, r := range ranges {
		f, err := readRange(ctx, tx, r, read)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		read.base += f.events
		rep.Events += f.events
		rep.Skipped += f.skipped
		addFold(&want, f)
		addPendingFold(wantPending, f)
		for i, t := range ts {
			td, found, truncated, err := diffs[i].diff(ctx, tx, r, f, cfg.MaxDifferences-kept[t.name])
			if err != nil {
				return nil, fmt.Errorf("verify: diff %s: %w", t.name, err)
			}
			sum := rep.Tables[t.name]
			sum.Rows += td.Rows
			sum.LiveRows += td.LiveRows
			sum.FoldRows += td.FoldRows
			rep.Tables[t.name] = sum
			kept[t.name] += len(found)
			rep.Differences = append(rep.Differences, found...)
			rep.Truncated = rep.Truncated || truncated
		}
	}
	if err := verifyCounts(ctx, tx, want, rep); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifyPending(ctx, tx, wantPending, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifySums(ctx, tx, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifyGates(ctx, tx, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifyFreshKeys(ctx, tx, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifyDepsLeft(ctx, tx, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifyScheduleCounts(ctx, tx, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if err := verifyEventStreams(ctx, tx, rep, cfg.MaxDifferences); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// verifyCounts compares the totals of task_counts with the folded tasks'.
func verifyCounts(ctx context.Context, tx pgx.Tx, want counts, rep *Report) error {
	var schema string
	if err := tx.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = 'task_counts'::regclass`).Scan(&schema); err != nil {
		return fmt.Errorf("find task_counts: %w", err)
	}
	live, err := sumCounts(ctx, tx, schema)
	if err != nil {
		return err
	}
	rep.Tables[countsTable] = TableDiff{Rows: 1}
	if live != want {
		rep.collect(countsTable, 1).add(Difference{Key: "sum over every row", Side: Changed, Columns: countColumns,
			Live: texts(live[:]), Events: texts(want[:])})
	}
	return nil
}

// differ compares the folded rows of one table with its live rows, one
// range of streams at a time.
type differ struct {
	t     table
	types []uint32 // column type OIDs, for the text form of each value
	casts []string // column types as SQL
	m     *pgtype.Map
}

func newDiffer(ctx context.Context, tx pgx.Tx, t table) (*differ, error) {
	d := &differ{t: t, m: pgtype.NewMap()}
	for _, c := range t.columns {
		var oid uint32
		var typ string
		if err := tx.QueryRow(ctx, `SELECT atttypid, format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped`, pgx.Identifier{t.name}.Sanitize(), c).
			Scan(&oid, &typ); err != nil {
			return nil, fmt.Errorf("type of %s.%s: %w", t.name, c, err)
		}
		d.types = append(d.types, oid)
		d.casts = append(d.casts, typ)
	}
	return d, nil
}

// diff compares the live rows of the streams in r with the fold's, both
// ways in one pass: a FULL JOIN on the key keeps the rows whose
// event-derived columns are distinct (NULLs equal, as EXCEPT compares
// them), so a row only live, a row only in the fold and a changed row each
// come out once, already paired. The folded rows travel as one text array
// per column, in PostgreSQL's text form, and are cast back on the server.
func (d *differ) diff(ctx context.Context, tx pgx.Tx, r streamRange, f *fold, max int) (TableDiff, []Difference, bool, error) {
	t := d.t
	var td TableDiff
	n, src := t.rows(f)
	td.Rows = int64(n)
	cols := make([][]*string, len(t.columns))
	for i := range cols {
		cols[i] = make([]*string, 0, n)
	}
	buf := make([]byte, 0, 256) // not nil: Encode returns nil for NULL only
	for src.Next() {
		row, err := src.Values()
		if err != nil {
			return td, nil, false, err
		}
		for i, v := range row {
			b, err := d.m.Encode(d.types[i], pgtype.TextFormatCode, v, buf[:0])
			if err != nil {
				return td, nil, false, fmt.Errorf("column %s: %w", t.columns[i], err)
			}
			if b == nil {
				cols[i] = append(cols[i], nil)
				continue
			}
			s := string(b)
			cols[i] = append(cols[i], &s)
		}
	}
	if err := src.Err(); err != nil {
		return td, nil, false, err
	}
	var args []any
	where := r.where(pgx.Identifier{t.stream}.Sanitize(), &args)
	nc := len(t.columns)
	sel := make([]string, 0, 2*nc)
	left, right, unnest, casts := make([]string, nc), make([]string, nc), make([]string, nc), make([]string, nc)
	for i, c := range t.columns {
		q := pgx.Identifier{c}.Sanitize()
		left[i], right[i] = "l."+q, "r."+q
		sel = append(sel, left[i]+"::text")
		args = append(args, cols[i])
		unnest[i] = fmt.Sprintf("$%d::text[]", len(args))
		casts[i] = fmt.Sprintf("u.c%d::%s AS %s", i, d.casts[i], q)
	}
	for i := range t.columns {
		sel = append(sel, right[i]+"::text")
	}
	names := make([]string, nc)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	var on, order []string
	for _, k := range t.key {
		q := pgx.Identifier{k}.Sanitize()
		on = append(on, "l."+q+" = r."+q)
		order = append(order, "coalesce(l."+q+", r."+q+")")
	}
	k0 := pgx.Identifier{t.key[0]}.Sanitize()
	kept := "true"
	if t.pruned != nil {
		kept = "NOT " + t.pruned("schedule_history")
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT l.%s IS NOT NULL, r.%s IS NOT NULL, %s
		FROM (SELECT %s FROM %s WHERE %s) l
		FULL JOIN (SELECT * FROM (SELECT %s FROM unnest(%s) AS u(%s)) r WHERE %s) r ON %s
		WHERE (%s) IS DISTINCT FROM (%s)
		ORDER BY %s`,
		k0, k0, strings.Join(sel, ", "),
		quoteIdents(t.columns), pgx.Identifier{t.name}.Sanitize(), where,
		strings.Join(casts, ", "), strings.Join(unnest, ", "), strings.Join(names, ", "), kept, strings.Join(on, " AND "),
		strings.Join(left, ", "), strings.Join(right, ", "), strings.Join(order, ", ")), args...)
	if err != nil {
		return td, nil, false, err
	}
	defer rows.Close()
	var out []Difference
	truncated := false
	for rows.Next() {
		var inLive, inFold bool
		vals := make([]*string, 2*nc)
		dest := []any{&inLive, &inFold}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return td, nil, false, err
		}
		if inLive {
			td.LiveRows++
		}
		if inFold {
			td.FoldRows++
		}
		if len(out) >= max {
			truncated = true
			continue
		}
		d := Difference{Table: t.name, Columns: t.columns}
		switch {
		case inLive && inFold:
			d.Side, d.Live, d.Events = Changed, vals[:nc], vals[nc:]
			d.Changed = changedColumns(t.columns, d.Live, d.Events)
		case inLive:
			d.Side, d.Live = LiveOnly, vals[:nc]
		default:
			d.Side, d.Events = EventsOnly, vals[nc:]
		}
		d.Key = keyOf(t, vals[:nc])
		if !inLive {
			d.Key = keyOf(t, vals[nc:])
		}
		out = append(out, d)
	}
	return td, out, truncated, rows.Err()
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

// collector adds one check's differing rows of a table to a report: each
// counts in the table's rows by its side, and at most max are kept (the
// report says when some were left out).
type collector struct {
	rep   *Report
	table string
	max   int
	kept  int
}

// collect starts the check of table, which the report then lists even when
// the check finds nothing.
func (r *Report) collect(table string, max int) *collector {
	r.Tables[table] = r.Tables[table]
	return &collector{rep: r, table: table, max: max}
}

// add records a row of the table that differs. A changed row that names no
// changed columns gets those whose values differ.
func (c *collector) add(d Difference) {
	d.Table = c.table
	td := c.rep.Tables[c.table]
	if d.Side != EventsOnly {
		td.LiveRows++
	}
	if d.Side != LiveOnly {
		td.FoldRows++
	}
	c.rep.Tables[c.table] = td
	if c.kept++; c.kept > c.max {
		c.rep.Truncated = true
		return
	}
	if d.Side == Changed && d.Changed == nil {
		d.Changed = changedColumns(d.Columns, d.Live, d.Events)
	}
	c.rep.Differences = append(c.rep.Differences, d)
}

// changedColumns names the columns whose live and folded values differ.
func changedColumns(cols []string, live, events []*string) []string {
	var out []string
	for i, col := range cols {
		if !sameValue(live[i], events[i]) {
			out = append(out, col)
		}
	}
	return out
}

// texts are numbers as the text values of a Difference.
func texts(vs []int64) []*string {
	out := make([]*string, len(vs))
	for i, v := range vs {
		s := strconv.FormatInt(v, 10)
		out[i] = &s
	}
	return out
}
