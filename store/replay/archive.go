package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
)

// ArchiveSchema holds the archived events for a replay from the archive
// (taskctl replay --from-archive): table archived_events, and view
// task_events, the archive plus the live log, each event once.
const ArchiveSchema = "replay_archive"

// ArchiveLoad says what LoadArchive read.
type ArchiveLoad struct {
	Periods []string      `json:"periods"`
	Events  int64         `json:"events"`
	Elapsed time.Duration `json:"elapsed"`
}

// LoadArchive checks every archive object of kind in bs against its
// manifest, and only when all check out loads their events into
// ArchiveSchema, replacing what an earlier load left there. Its view
// task_events is the log a replay from the archive folds: the archived
// events that are no longer live, then the live log. A compaction whose
// replaced events came from the archive counts nothing in the sums (its
// originals do); one whose originals are not there stands for them.
// VerifyConfig.EventsSchema = ArchiveSchema verifies the live projections
// against that log, in one snapshot of the live side.
func LoadArchive(ctx context.Context, pool *pgxpool.Pool, bs blob.Store, kind string) (*ArchiveLoad, error) {
	start := time.Now()
	periods, err := archive.List(ctx, bs, kind)
	if err != nil {
		return nil, fmt.Errorf("load archive: %w", err)
	}
	rep := &ArchiveLoad{}
	// Check first: a wrong object stops the load before anything is written.
	for _, p := range periods {
		if _, err := archive.VerifyObject(ctx, bs, p); err != nil {
			return nil, fmt.Errorf("load archive: %w", err)
		}
		rep.Periods = append(rep.Periods, p.String())
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("load archive: %w", err)
	}
	defer conn.Release()
	schema := pgx.Identifier{ArchiveSchema}.Sanitize()
	table := pgx.Identifier{ArchiveSchema, "archived_events"}.Sanitize()
	for _, sql := range []string{
		`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`,
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + table + ` (seq bigint NOT NULL, tx_id bigint NOT NULL, stream_type text NOT NULL, stream_id uuid NOT NULL,
			version int NOT NULL, type text NOT NULL, schema_version int NOT NULL, data jsonb NOT NULL, meta jsonb NOT NULL,
			occurred_at timestamptz NOT NULL)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("load archive: %w", err)
		}
	}
	cols := []string{"seq", "tx_id", "stream_type", "stream_id", "version", "type", "schema_version", "data", "meta", "occurred_at"}
	for _, p := range periods {
		var rows [][]any
		flush := func() error {
			if len(rows) == 0 {
				return nil
			}
			n, err := conn.CopyFrom(ctx, pgx.Identifier{ArchiveSchema, "archived_events"}, cols, pgx.CopyFromRows(rows))
			rep.Events += n
			rows = rows[:0]
			return err
		}
		_, err := archive.Read(ctx, bs, p, func(l archive.Line) error {
			id, err := uuid.Parse(l.StreamID)
			if err != nil {
				return fmt.Errorf("%s: seq %d: stream id %q: %w", p.Key(), l.Seq, l.StreamID, err)
			}
			rows = append(rows, []any{l.Seq, l.TxID, l.StreamType, pgtype.UUID{Bytes: id, Valid: true}, int32(l.Version), l.Type,
				int32(l.SchemaVersion), string(l.Data), string(l.Meta), l.OccurredAt})
			if len(rows) >= 5000 {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			_, _ = conn.Exec(context.WithoutCancel(ctx), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
			return nil, fmt.Errorf("load archive: %w", err)
		}
	}
	live, err := liveSchema(ctx, conn)
	if err != nil {
		return nil, err
	}
	events := pgx.Identifier{live, "task_events"}.Sanitize()
	for _, sql := range []string{
		`CREATE UNIQUE INDEX ON ` + table + ` (seq)`,
		`CREATE INDEX ON ` + table + ` (stream_id, version)`,
		`CREATE INDEX ON ` + table + ` (type)`,
		`ANALYZE ` + table,
		// The archived events no longer live, then the live log. A
		// compaction counts nothing in the sums when its originals are
		// here (countedEvents reads the mark in its meta).
		`CREATE VIEW ` + pgx.Identifier{ArchiveSchema, "task_events"}.Sanitize() + ` AS
		SELECT a.seq, a.tx_id, a.stream_type, a.stream_id, a.version, a.type, a.schema_version, a.data, a.meta, a.occurred_at
		  FROM ` + table + ` a WHERE NOT EXISTS (SELECT 1 FROM ` + events + ` l WHERE l.seq = a.seq)
		UNION ALL
		SELECT l.seq, l.tx_id::text::bigint, l.stream_type, l.stream_id, l.version, l.type, l.schema_version, l.data,
		       CASE WHEN l.type = 'task.compacted' AND EXISTS (
		           SELECT 1 FROM ` + table + ` o WHERE o.stream_id = l.stream_id AND o.version = 1)
		            THEN l.meta || '{"originals_archived": true}' ELSE l.meta END,
		       l.occurred_at
		  FROM ` + events + ` l`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("load archive: %w", err)
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func liveSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var s string
	err := q.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = 'worker_tasks'::regclass`).Scan(&s)
	if err != nil {
		return "", fmt.Errorf("find the live schema: %w", err)
	}
	return s, nil
}

// useEvents points the unqualified task_events of conn's queries at the
// view of schema (the projections stay the live ones).
func useEvents(ctx context.Context, conn *pgx.Conn, schema string) error {
	live, err := liveSchema(ctx, conn)
	if err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, "task_events"}.Sanitize()).
		Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("no archive loaded: %s.task_events does not exist (load it first: taskctl replay --from-archive)", schema)
	}
	_, err = conn.Exec(ctx, `SELECT set_config('search_path', $1, false)`,
		pgx.Identifier{schema}.Sanitize()+", "+pgx.Identifier{live}.Sanitize())
	return err
}
