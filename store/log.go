package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// eventColumns names the converted tx_id tx_num: left as tx_id, an output
// column would shadow the table's, and ORDER BY tx_id would sort by the
// expression instead of walking task_events_position (a sort of the whole
// log on every page; ADR 010).
//
// The meta's fields come as columns: decoding each meta's JSON here was a
// third of a log read's CPU, and reading them from the jsonb did not make
// PostgreSQL's part of the read any longer (ADR 036).
const eventColumns = `seq, tx_id::text::bigint AS tx_num, stream_type, stream_id, version, type, schema_version, data,
	coalesce(meta->'actor'->>'kind', ''), coalesce(meta->'actor'->>'id', ''), coalesce(meta->'actor'->>'name', ''),
	coalesce(meta->>'request_id', ''), coalesce((meta->>'causation_seq')::bigint, 0), coalesce(meta->>'correlation_id', ''),
	occurred_at`

func scanEvent(r pgx.CollectableRow) (events.Envelope, error) {
	var e events.Envelope
	var txID int64
	if err := r.Scan(eventDest(&e, &txID)...); err != nil {
		return e, err
	}
	return e, finishEvent(&e, txID)
}

// eventDest is where eventColumns scan to. Data scans as bytes: into a
// json.RawMessage pgx would validate it with encoding/json first.
func eventDest(e *events.Envelope, txID *int64) []any {
	return []any{&e.Seq, txID, &e.StreamType, &e.StreamID, &e.Version, &e.Type, &e.SchemaVersion,
		(*[]byte)(&e.Data), &e.Meta.Actor.Kind, &e.Meta.Actor.ID, &e.Meta.Actor.Name, &e.Meta.RequestID,
		&e.Meta.CausationSeq, &e.Meta.CorrelationID, &e.OccurredAt}
}

// finishEvent completes an event scanned to eventDest.
func finishEvent(e *events.Envelope, txID int64) error {
	e.TxID = uint64(txID)
	e.OccurredAt = e.OccurredAt.UTC()
	return e.Decode()
}

// Stream reads one stream's events in version order.
func (db *DB) Stream(ctx context.Context, q Querier, streamID string) ([]events.Envelope, error) {
	return db.streamSince(ctx, q, streamID, timeBounds{})
}

func (db *DB) streamSince(ctx context.Context, q Querier, streamID string, b timeBounds) ([]events.Envelope, error) {
	args := []any{streamID}
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM task_events WHERE stream_id = $1`+b.render("occurred_at", &args)+
		` ORDER BY version`, args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read stream: %w", err))
	}
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, mapErr(err)
}

// TaskStream is Stream for a task's timeline, read within the times its
// row says: every event of a task's stream comes after its creation in the
// log, so it occurred at most ClockSkew before the task's created_at, and
// before the row's last change, so at most ClockSkew after its updated_at.
// A log partitioned by time reads the partitions of the task's life only.
// When the events read stop short of the row's version (an event written
// meanwhile, a compaction at the log's end), the stream is read again from
// the creation on with no end; a stream that is not a task's is read whole.
func (db *DB) TaskStream(ctx context.Context, q Querier, id string) ([]events.Envelope, error) {
	var created, updated time.Time
	var version int
	err := q.QueryRow(ctx, `SELECT created_at, updated_at, version FROM worker_tasks WHERE id = $1`, id).Scan(&created, &updated, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return db.Stream(ctx, q, id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("read task stream: %w", err))
	}
	b := timeBounds{from: created.Add(-ClockSkew), until: updated.Add(ClockSkew)}
	if b.until.Before(b.from) {
		b.until = time.Time{}
	}
	evs, err := db.streamSince(ctx, q, id, b)
	if err != nil || b.until.IsZero() || (len(evs) > 0 && evs[len(evs)-1].Version >= version) {
		return evs, err
	}
	return db.streamSince(ctx, q, id, timeBounds{from: b.from})
}

// LogFilter narrows a consumer read. Zero values do not filter.
type LogFilter struct {
	Types    []string
	StreamID string
	// WorkerID keeps the events about one user: those whose data names it as
	// worker_id, those it caused (meta actor id) and those of its own stream
	// (registered, went online/offline). It must be a UUID.
	WorkerID string
}

// matchesAll says whether the filter keeps every event.
func (f LogFilter) matchesAll() bool {
	return len(f.Types) == 0 && f.StreamID == "" && f.WorkerID == ""
}

// where renders the filter's type and stream conditions, appending their
// arguments. Only the conditions in use are rendered, so each combination
// gets its own plan.
func (f LogFilter) where(args *[]any) string {
	arg := func(v any) string {
		*args = append(*args, v)
		return fmt.Sprintf("$%d", len(*args))
	}
	var sql string
	if len(f.Types) > 0 {
		sql += ` AND type = ANY (` + arg(f.Types) + `::text[])`
	}
	if f.StreamID != "" {
		sql += ` AND stream_id = ` + arg(f.StreamID) + `::uuid`
	}
	return sql
}

// ReadLog returns up to limit events after pos in consumer order (DESIGN §2):
// only rows of transactions older than every transaction still running, so a
// reader that follows the returned positions never skips a row that commits
// late. Its statements name the times they need (logBounds), so a log
// partitioned by time is read only from the position's period on.
func (db *DB) ReadLog(ctx context.Context, q Querier, after events.Position, limit int, f LogFilter) ([]events.Envelope, error) {
	notBefore, err := registeredSince(ctx, q, f.WorkerID)
	if err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	return db.readLogBounded(ctx, after, limit, notBefore, func(after events.Position, limit int, b timeBounds) ([]events.Envelope, error) {
		sql, args := readLogSQL(after, limit, f, b)
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return nil, mapErr(fmt.Errorf("read log: %w", err))
		}
		out, err := pgx.CollectRows(rows, scanEvent)
		return out, mapErr(err)
	})
}

// registeredSince is the earliest time an event about user id can have
// occurred: its registration, less the clocks' skew (every event about a
// user comes after it exists), so a read filtered by a new user plans no
// partition from before it. Zero for no id, or no row (a projection being
// rebuilt): no bound.
func registeredSince(ctx context.Context, q Querier, id string) (time.Time, error) {
	if id == "" {
		return time.Time{}, nil
	}
	var at time.Time
	err := q.QueryRow(ctx, `SELECT created_at FROM users WHERE id = $1::uuid`, id).Scan(&at)
	switch {
	case err == nil:
		return at.Add(-ClockSkew), nil
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil
	}
	return time.Time{}, mapErr(fmt.Errorf("the user's registration: %w", err))
}

// timeBounds narrow a read of the log to occurred_at in [from, until); a
// zero end is open.
type timeBounds struct{ from, until time.Time }

// render appends the bounds' conditions on column col to a WHERE clause.
func (b timeBounds) render(col string, args *[]any) string {
	var sql string
	if !b.from.IsZero() {
		*args = append(*args, b.from)
		sql += fmt.Sprintf(` AND %s >= $%d`, col, len(*args))
	}
	if !b.until.IsZero() {
		*args = append(*args, b.until)
		sql += fmt.Sprintf(` AND %s < $%d`, col, len(*args))
	}
	return sql
}

// logWindow is how far past its floor a read from a position looks first:
// a page of a reader far behind reads a day or two of partitions, not every
// one up to today.
const logWindow = 24 * time.Hour

// logWindows are the windows a read looks in, in turn, before it reads to
// the log's end: a page that its first day leaves short (a filter that
// matches few events, a log thinned by compaction) reads a week of
// partitions next, rather than every one up to today (ADR 038).
var logWindows = []time.Duration{logWindow, 7 * logWindow}

// readLogBounded reads up to limit events after pos through read, with the
// times they can have: from the log mark at or before pos on (logFloor),
// and first only up to each of logWindows past it. An event of a window is
// the next one in consumer order when it occurred ClockSkew before the
// window's end: every event before it in the log occurred at most
// ClockSkew after it. So a window's page is kept up to its last such
// event; when that leaves the page short, the next window reads on, and
// after the last one the rest is read with no end. Every read starts at
// the floor of its position, never later: an event that an older
// transaction hid from one statement may be visible to the next. A
// notBefore the caller knows every event it wants to have occurred at or
// after (zero: none) raises the floor.
func (db *DB) readLogBounded(ctx context.Context, pos events.Position, limit int, notBefore time.Time,
	read func(after events.Position, limit int, b timeBounds) ([]events.Envelope, error),
) ([]events.Envelope, error) {
	from, ok := db.logFloor(pos)
	base := from
	if !ok {
		// Before every mark (the log's start): no floor, but the windows
		// still end after the first mark, so the oldest partitions only
		// are planned.
		first, ok := db.firstMark()
		if !ok {
			return read(pos, limit, timeBounds{from: notBefore})
		}
		base = first
	}
	if notBefore.After(from) {
		from = notBefore
	}
	if notBefore.After(base) {
		base = notBefore
	}
	var out []events.Envelope
	var lastUntil time.Time // the last window's end
	for _, window := range logWindows {
		until := base.Add(window)
		// A window ending inside a partition prunes nothing there: the
		// read would only filter that partition's entries by time, every
		// one of them when the window holds fewer than limit events
		// (migration 054 made the log before it one partition).
		if end, ok := db.partitionEnd(until.Add(-time.Nanosecond)); ok && end.After(until) {
			until = end
		}
		if until.After(db.Now().Add(-ClockSkew)) {
			break
		}
		if !until.After(lastUntil) {
			continue // the week ends in the partition the day did: read already
		}
		lastUntil = until
		evs, err := read(pos, limit-len(out), timeBounds{from: from, until: until})
		if err != nil {
			return nil, err
		}
		keep := 0
		for i, e := range evs {
			if e.OccurredAt.Before(until.Add(-ClockSkew)) {
				keep = i + 1
			}
		}
		out = append(out, evs[:keep]...)
		if len(out) == limit {
			return out, nil
		}
		if keep > 0 {
			pos = out[len(out)-1].Position()
			if f, ok := db.logFloor(pos); ok && f.After(from) {
				from = f
			}
		}
	}
	rest, err := read(pos, limit-len(out), timeBounds{from: from})
	if err != nil || len(out) == 0 {
		return rest, err
	}
	return append(out, rest...), nil
}

const visibleAfter = `(tx_id, seq) > ($1::text::xid8, $2) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())`

// quoteLiteral is s as an SQL string literal (standard_conforming_strings,
// on since PostgreSQL 9.1).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// typeBranches is one parenthesised branch per distinct type, each naming
// its type as a literal, joined by UNION ALL.
func typeBranches(types []string, branch func(lit string) string) string {
	ts := slices.Clone(types)
	slices.Sort(ts)
	var out []string
	for _, t := range slices.Compact(ts) {
		out = append(out, `(`+branch(quoteLiteral(t))+`)`)
	}
	return strings.Join(out, ` UNION ALL `)
}

func readLogSQL(after events.Position, limit int, f LogFilter, b timeBounds) (string, []any) {
	args := []any{fmt.Sprint(after.TxID), after.Seq, limit}
	visibleAfter := visibleAfter + b.render("occurred_at", &args)
	if f.WorkerID == "" && f.StreamID == "" && len(f.Types) > 0 {
		// One ordered scan of the (type, tx_id, seq) index per type, their
		// first pages merged by position. A single scan filtered by type
		// would walk every event of other types after the position: a
		// reactor waiting for rare events (task.failed) would read the whole
		// log since the last one on every wake. Each type is a literal, not
		// a parameter: each partition of a log partitioned by time plans its
		// scan from its own statistics of that type, and the plan is made
		// for the times the read names (ADR 034).
		return `SELECT ` + eventColumns + ` FROM (` + typeBranches(f.Types, func(lit string) string {
			return `SELECT * FROM task_events WHERE type = ` + lit + ` AND ` + visibleAfter + ` ORDER BY tx_id, seq LIMIT $3`
		}) + `) e ORDER BY e.tx_id, e.seq LIMIT $3`, args
	}
	where := f.where(&args)
	if f.WorkerID == "" {
		return `SELECT ` + eventColumns + ` FROM task_events WHERE ` + visibleAfter + where +
			` ORDER BY tx_id, seq LIMIT $3`, args
	}
	// A worker's events: the first page of each way an event can be about
	// it (each an ordered index scan, migration 004), merged by position.
	// The first limit of the union are the first limit of the whole.
	args = append(args, f.WorkerID)
	w := fmt.Sprintf("$%d", len(args))
	branch := func(cond string) string {
		return `(SELECT * FROM task_events WHERE ` + visibleAfter + where + ` AND ` + cond + ` ORDER BY tx_id, seq LIMIT $3)`
	}
	return `SELECT ` + eventColumns + ` FROM (` +
		branch(`data ? 'worker_id' AND data->>'worker_id' = `+w+`::text`) + ` UNION ` +
		branch(`meta->'actor'->>'id' = `+w+`::text`) + ` UNION ` +
		branch(`stream_id = `+w+`::uuid`) +
		`) e ORDER BY e.tx_id, e.seq LIMIT $3`, args
}
