package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

const eventColumns = `seq, tx_id::text::bigint, stream_type, stream_id, version, type, schema_version, data, meta, occurred_at`

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
}

// ReadLog returns up to limit events after pos in consumer order (DESIGN §2):
// only rows of transactions older than every transaction still running, so a
// reader that follows the returned positions never skips a row that commits
// late.
func (db *DB) ReadLog(ctx context.Context, q Querier, after events.Position, limit int, f LogFilter) ([]events.Envelope, error) {
	var types []string
	if len(f.Types) > 0 {
		types = f.Types
	}
	var stream *string
	if f.StreamID != "" {
		stream = &f.StreamID
	}
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM task_events
		WHERE (tx_id, seq) > ($1::text::xid8, $2)
		  AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
		  AND ($3::text[] IS NULL OR type = ANY ($3))
		  AND ($4::uuid IS NULL OR stream_id = $4)
		ORDER BY tx_id, seq LIMIT $5`, fmt.Sprint(after.TxID), after.Seq, types, stream, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read log: %w", err))
	}
	out, err := pgx.CollectRows(rows, scanEvent)
	return out, mapErr(err)
}
