// Package migrations holds the schema as golang-migrate SQL files, embedded,
// and applies them. The schema lives here and nowhere else.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	// The pgx/v5 driver registers the "pgx5" scheme.
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// FS holds the NNN_name.up.sql / .down.sql files.
//
//go:embed *.sql
var FS embed.FS

// Up applies every migration not yet applied. A database already past this
// binary's last migration (a newer release migrated it, and this one is the
// rollback) is left as it is, and Up answers NewerSchemaError.
func Up(ctx context.Context, databaseURL string) error {
	latest, err := Latest()
	if err != nil {
		return err
	}
	return run(ctx, databaseURL, func(m *migrate.Migrate) error {
		if v, dirty, err := m.Version(); err == nil && !dirty && v > latest {
			return NewerSchemaError{Database: v, Binary: latest}
		}
		return m.Up()
	})
}

// NewerSchemaError says the database holds migrations this binary does
// not know. Each release's schema runs the release before it (docs/deploy.md,
// "To go back").
type NewerSchemaError struct{ Database, Binary uint }

func (e NewerSchemaError) Error() string {
	return fmt.Sprintf("the database schema is at migration %d, newer than this binary's last (%d): a newer release migrated it; "+
		"nothing to apply (to go back a migration, run `task-service migrate down` with the newer binary)", e.Database, e.Binary)
}

// Latest is the number of the last migration this binary holds, as
// golang-migrate's source reads the embedded names.
func Latest() (uint, error) {
	src, err := iofs.New(FS, ".")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	defer src.Close()
	v, err := src.First()
	for err == nil {
		var next uint
		if next, err = src.Next(v); err == nil {
			v = next
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	return v, nil
}

// Down reverts the last `steps` migrations (all when steps <= 0).
func Down(ctx context.Context, databaseURL string, steps int) error {
	return run(ctx, databaseURL, func(m *migrate.Migrate) error {
		if steps <= 0 {
			return m.Down()
		}
		return m.Steps(-steps)
	})
}

// Version reports the applied version and whether a failed migration left it
// dirty; 0 when none is applied (a fresh or fully reverted database).
func Version(ctx context.Context, databaseURL string) (version uint, dirty bool, err error) {
	err = run(ctx, databaseURL, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		return err
	})
	return version, dirty, err
}

func run(ctx context.Context, databaseURL string, op func(*migrate.Migrate) error) error {
	if err := CheckServer(ctx, databaseURL); err != nil {
		return err
	}
	src, err := iofs.New(FS, ".")
	if err != nil {
		return fmt.Errorf("read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, pgx5URL(databaseURL))
	if err != nil {
		return fmt.Errorf("connect for migrations: %w", err)
	}
	defer m.Close()
	done := make(chan error, 1)
	go func() { done <- op(m) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		m.GracefulStop <- true
		err = <-done
	}
	if errors.Is(err, migrate.ErrNoChange) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// pgx5URL swaps the postgres:// scheme for the driver's pgx5://.
func pgx5URL(u string) string {
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if len(u) >= len(prefix) && u[:len(prefix)] == prefix {
			return "pgx5://" + u[len(prefix):]
		}
	}
	return u
}
