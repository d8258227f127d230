package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MinServerVersion is the oldest PostgreSQL the schema runs on: the log's
// positions are xid8 transaction ids (pg_current_xact_id, pg_snapshot_xmin),
// which came in PostgreSQL 13.
const MinServerVersion = 130000

// CheckServer refuses a PostgreSQL older than MinServerVersion, before any
// migration half-applies on it.
func CheckServer(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var num int
	var version string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).Scan(&num, &version); err != nil {
		return fmt.Errorf("read the server's version: %w", err)
	}
	return checkVersion(num, version)
}

func checkVersion(num int, version string) error {
	if num < MinServerVersion {
		return fmt.Errorf("PostgreSQL %s is too old: task-service needs PostgreSQL 13 or later (its log positions are xid8 transaction ids); upgrade the server (docs/deploy.md, \"Upgrading PostgreSQL\")", version)
	}
	return nil
}
