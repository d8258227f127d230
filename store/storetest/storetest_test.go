package storetest

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/migrations"
)

func TestNewDBIsMigratedAndPrivate(t *testing.T) {
	ctx := context.Background()
	a, b := NewPool(t), NewPool(t)

	var nameA, nameB string
	require.NoError(t, a.QueryRow(ctx, "SELECT current_database()").Scan(&nameA))
	require.NoError(t, b.QueryRow(ctx, "SELECT current_database()").Scan(&nameB))
	require.NotEqual(t, nameA, nameB)
	require.Regexp(t, testDBName, nameA)

	// Migrated: golang-migrate's bookkeeping says clean at the latest version.
	u, err := url.Parse(DatabaseURL(t))
	require.NoError(t, err)
	u.Path = "/" + nameA
	version, dirty, err := migrations.Version(ctx, u.String())
	require.NoError(t, err)
	require.False(t, dirty)
	require.Positive(t, version)

	// Private: a table made in one is not in the other.
	_, err = a.Exec(ctx, "CREATE TABLE storetest_probe (x int)")
	require.NoError(t, err)
	var exists bool
	require.NoError(t, b.QueryRow(ctx, "SELECT to_regclass('storetest_probe') IS NOT NULL").Scan(&exists))
	require.False(t, exists)
}

func TestNewDBDroppedAfterTest(t *testing.T) {
	ctx := context.Background()
	var name string
	var straggler *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		u := NewDB(t)
		var err error
		// A session still connected when the test ends must not keep the drop from working.
		straggler, err = pgx.Connect(ctx, u)
		require.NoError(t, err)
		require.NoError(t, straggler.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	})
	require.NotEmpty(t, name)
	defer straggler.Close(ctx)

	conn, err := pgx.Connect(ctx, DatabaseURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
	require.Zero(t, n, "database %s still exists after its test ended", name)
}

func TestNewDBConcurrent(t *testing.T) {
	const n = 12
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			u := NewDB(t)
			conn, err := pgx.Connect(context.Background(), u)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var name string
			require.NoError(t, conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
			mu.Lock()
			defer mu.Unlock()
			require.False(t, seen[name])
			seen[name] = true
		})
	}
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"postgres://postgres@127.0.0.1:55432/taskservice?sslmode=disable",
			"postgres://postgres@127.0.0.1:55432/x?sslmode=disable"},
		{"postgresql://u:p%40ss@h/db", "postgresql://u:p%40ss@h/x"},
		{"postgres://h:5432", "postgres://h:5432/x"},
		{"host=/tmp dbname=taskservice", "host=/tmp dbname=taskservice dbname=x"},
	} {
		got, err := withDatabase(tc.base, "x")
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	// The keyword/value form really resolves to the new name.
	got, err := withDatabase("host=/tmp dbname=taskservice user=u", "x")
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(got)
	require.NoError(t, err)
	require.Equal(t, "x", cfg.Database)
}

func TestMigrationsHashStable(t *testing.T) {
	a, err := migrationsHash()
	require.NoError(t, err)
	require.Len(t, a, 64)
	b, err := migrationsHash()
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// fatalTB records Fatal instead of failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestDatabaseURLFailsWithoutEnv(t *testing.T) {
	t.Setenv("TEST_DATABASE_URL", "")
	t.Setenv("DATABASE_URL", "")
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		DatabaseURL(f)
	}()
	<-done
	require.True(t, strings.Contains(f.msg, "set TEST_DATABASE_URL or run `make test`"), f.msg)

	t.Setenv("DATABASE_URL", "postgres://fallback/db")
	require.Equal(t, "postgres://fallback/db", DatabaseURL(t))
	t.Setenv("TEST_DATABASE_URL", "postgres://test/db")
	require.Equal(t, "postgres://test/db", DatabaseURL(t))
}

// BenchmarkCloneTemplate measures what NewDB costs per test once the template
// exists: CREATE DATABASE from the template, then DROP DATABASE.
func BenchmarkCloneTemplate(b *testing.B) {
	ctx := context.Background()
	base := DatabaseURL(b)
	tmpl, err := ensureTemplate(ctx, base)
	require.NoError(b, err)
	conn, err := pgx.Connect(ctx, base)
	require.NoError(b, err)
	defer conn.Close(ctx)
	for b.Loop() {
		name := newDatabaseName()
		require.NoError(b, cloneTemplate(ctx, conn, name, tmpl))
		_, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)")
		require.NoError(b, err)
	}
}
