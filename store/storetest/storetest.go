package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/migrations"
)

// PoolMaxConns is the size of the pools NewPool opens.
const PoolMaxConns = 80

const (
	templatePrefix = "taskservice_template_"
	// staleAfter is the age from which a leftover test database is dropped.
	staleAfter = 24 * time.Hour
	// setupTimeout bounds building the template and cloning it.
	setupTimeout = 3 * time.Minute
)

// templateLockKey is the advisory lock that serialises template builds across
// processes (advisory locks are per database; all callers lock in the base one).
var templateLockKey = func() int64 {
	sum := sha256.Sum256([]byte("github.com/clawdbot/task-service/store/storetest template"))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}()

var testDBName = regexp.MustCompile(`^test_([0-9]{10})_[0-9a-f]{12}$`)

var (
	templateMu    sync.Mutex
	templateReady = map[string]string{} // base URL -> template database name
)

// DatabaseURL returns the PostgreSQL server for tests: TEST_DATABASE_URL, else
// DATABASE_URL. Without either the test fails; it never skips silently.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return v
		}
	}
	t.Fatal("no PostgreSQL for tests: set TEST_DATABASE_URL or run `make test`")
	return ""
}

// NewDB creates a fresh, fully migrated database for t, dropped when t ends, and
// returns its URL (the base URL with the database name replaced).
func NewDB(t testing.TB) string {
	t.Helper()
	base := DatabaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	tmpl, err := ensureTemplate(ctx, base)
	require.NoError(t, err, "storetest: prepare the migrated template database")

	name := newDatabaseName()
	dbURL, err := withDatabase(base, name)
	require.NoError(t, err, "storetest: derive the test database URL")

	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "storetest: connect to %s", redact(base))
	defer admin.Close(context.Background())
	require.NoError(t, cloneTemplate(ctx, admin, name, tmpl), "storetest: create test database")

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("storetest: drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("storetest: drop test database %s: %v", name, err)
		}
	})
	return dbURL
}

// NewPool is NewDB plus a pool on the new database (at most PoolMaxConns
// connections), closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dbURL := NewDB(t)
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err, "storetest: parse database URL")
	cfg.MaxConns = PoolMaxConns

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err, "storetest: open pool")
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		require.NoError(t, err, "storetest: ping test database")
	}
	// Registered after NewDB's cleanup, so it runs before the drop.
	t.Cleanup(func() {
		// Close waits for every acquired connection; a test that leaks one (rows
		// never closed, a tx never ended) would hang here forever. Report it and
		// let the drop (WITH FORCE) end those sessions.
		done := make(chan struct{})
		go func() { pool.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("storetest: pool still has acquired connections 10s after the test ended (rows or tx not closed?)")
		}
	})
	return pool
}

// ensureTemplate returns the name of the migrated template database on the server
// of base, building it if no finished one exists.
func ensureTemplate(ctx context.Context, base string) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if name, ok := templateReady[base]; ok {
		return name, nil
	}
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := templatePrefix + sum[:16]

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(base), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("advisory lock: %w", err)
	}
	// Closing the session releases the lock too; unlock early when we can.
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", templateLockKey)

	dropStaleTestDatabases(ctx, admin)

	var isTemplate, allowConn bool
	err = admin.QueryRow(ctx,
		"SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", name).
		Scan(&isTemplate, &allowConn)
	switch {
	case err == nil && isTemplate && !allowConn:
		templateReady[base] = name
		return name, nil
	case err == nil:
		// Left half-built by an interrupted run: start over.
		if isTemplate {
			if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE false"); err != nil {
				return "", fmt.Errorf("unmark unfinished template %s: %w", name, err)
			}
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("drop unfinished template %s: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("look up template %s: %w", name, err)
	}

	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE template0"); err != nil {
		return "", fmt.Errorf("create template %s: %w", name, err)
	}
	tmplURL, err := withDatabase(base, name)
	if err != nil {
		return "", err
	}
	// migrations.Up closes its connections before returning; their backends may
	// take a moment to exit, which cloneTemplate tolerates.
	if err := migrations.Up(ctx, tmplURL); err != nil {
		return "", fmt.Errorf("migrate template %s: %w", name, err)
	}
	// Finished: mark it a template nobody connects to. Only this state counts as built.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("mark template %s: %w", name, err)
	}
	templateReady[base] = name
	return name, nil
}

// cloneTemplate runs CREATE DATABASE name TEMPLATE tmpl, retrying while sessions
// (typically the migration's, still exiting) are connected to the template.
func cloneTemplate(ctx context.Context, admin *pgx.Conn, name, tmpl string) error {
	sql := "CREATE DATABASE " + ident(name) + " TEMPLATE " + ident(tmpl)
	delay := 50 * time.Millisecond
	for {
		_, err := admin.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// dropStaleTestDatabases drops test databases older than staleAfter that nobody is
// connected to: leftovers of test binaries killed before their cleanups ran. Best
// effort; errors are ignored.
func dropStaleTestDatabases(ctx context.Context, admin *pgx.Conn) {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'test\\_%'")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		m := testDBName.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		sec, _ := strconv.ParseInt(m[1], 10, 64)
		if time.Since(time.Unix(sec, 0)) < staleAfter {
			continue
		}
		// Without FORCE: a database still in use is left alone.
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(n))
	}
}

var (
	hashOnce sync.Once
	hashSum  string
	hashErr  error
)

// migrationsHash is the hex SHA-256 of the names and contents of the embedded
// migration files.
func migrationsHash() (string, error) {
	hashOnce.Do(func() {
		h := sha256.New()
		hashErr = fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(migrations.FS, path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
			h.Write(b)
			return nil
		})
		if hashErr != nil {
			hashErr = fmt.Errorf("hash migrations: %w", hashErr)
			return
		}
		hashSum = hex.EncodeToString(h.Sum(nil))
	})
	return hashSum, hashErr
}

func newDatabaseName() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return fmt.Sprintf("test_%010d_%s", time.Now().Unix(), hex.EncodeToString(b[:]))
}

// withDatabase returns base with its database replaced by name. base is a URL
// (postgres://...) or a keyword/value connection string.
func withDatabase(base, name string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		q := u.Query()
		if q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// Keyword/value form: a later dbname overrides an earlier one.
	return base + " dbname=" + name, nil
}

// redact hides a password in a URL for messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return s
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
