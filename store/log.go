package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// eventColumns names the converted tx_id tx_num: left as tx_id, an output
// column would shadow the table's, and ORDER BY tx_id would sort by the
// expression instead of walking task_events_position (a sort of the whole
// log on every page; ADR 010).
const eventColumns = `seq, tx_id::text::bigint AS tx_num, stream_type, stream_id, version, type, schema_version, data, meta, occurred_at`

func scanEvent(r pgx.CollectableRow) (events.Envelope, error) {
	var e events.Envelope
	var txID int64
	if err := r.Scan(&e.Seq, &txID, &e.StreamType, &e.StreamID, &e.Version, &e.Type, &e.SchemaVersion,
		&e.Data, &e.Meta, &e.OccurredAt); err != nil {
		return e, err
	}
	e.TxID = uint64(txID)
	e.OccurredAt = e.OccurredAt.UTC()
	return e, e.Decode()
}

// Stream reads one stream's events in version order.
func (db *DB) Stream(ctx context.Context, q Querier, streamID string) ([]events.Envelope, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM task_events WHERE stream_id = $1 ORDER BY version`, streamID)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read stream: %w", err))
	}
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, mapErr(err)
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
// late.
func (db *DB) ReadLog(ctx context.Context, q Querier, after events.Position, limit int, f LogFilter) ([]events.Envelope, error) {
	sql, args := readLogSQL(after, limit, f)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read log: %w", err))
	}
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, mapErr(err)
}

const visibleAfter = `(tx_id, seq) > ($1::text::xid8, $2) AND tx_id < pg_snapshot_xmin(pg_current_snapshot())`

func readLogSQL(after events.Position, limit int, f LogFilter) (string, []any) {
	args := []any{fmt.Sprint(after.TxID), after.Seq, limit}
	if f.WorkerID == "" && f.StreamID == "" && len(f.Types) > 0 {
		// One ordered scan of the (type, tx_id, seq) index per type, their
		// first pages merged by position. A single scan filtered by type
		// would walk every event of other types after the position: a
		// reactor waiting for rare events (task.failed) would read the whole
		// log since the last one on every wake.
		types := slices.Clone(f.Types)
		slices.Sort(types)
		args = append(args, slices.Compact(types))
		return `SELECT ` + eventColumns + ` FROM unnest($4::text[]) AS t(want), LATERAL (
			SELECT * FROM task_events WHERE type = t.want AND ` + visibleAfter + `
			 ORDER BY tx_id, seq LIMIT $3) e ORDER BY e.tx_id, e.seq LIMIT $3`, args
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
