package main_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// privatePG is a PostgreSQL cluster of the soak's own, on its own port and
// in its own directory, so that it can be restarted fast and immediately
// without touching anybody else's. PostgreSQL refuses to run as root, so a
// root test runs it as the postgres user.
type privatePG struct {
	t    *testing.T
	bin  string
	dir  string
	data string
	port int
	url  string
	opts string // the server's settings, for start
}

func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	bin := os.Getenv("PGBIN")
	if bin == "" {
		bin = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); err != nil {
		t.Fatalf("no PostgreSQL server binaries in %s (set PGBIN; scripts/devdb.sh installs postgresql-15): %v", bin, err)
	}
	dir, err := os.MkdirTemp("", "task-service-soak-pg-")
	require.NoError(t, err)
	p := &privatePG{t: t, bin: bin, dir: dir, data: filepath.Join(dir, "data"), port: freePort(t)}
	if os.Geteuid() == 0 {
		out, err := exec.Command("chown", "postgres:", dir).CombinedOutput()
		require.NoError(t, err, "chown %s to postgres: %s", dir, out)
	}
	t.Cleanup(func() {
		_ = p.pgCtl("stop", "-m", "immediate")
		_ = os.RemoveAll(dir)
	})
	require.NoError(t, p.run("initdb", "-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"))
	// Room for three instances' pools (DB_MAX_CONNS) and their listeners.
	p.opts = fmt.Sprintf("-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_connections=200", p.port, dir)
	require.NoError(t, p.start())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE taskservice")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	p.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/taskservice?sslmode=disable", p.port)
	return p
}

// restart restarts the server: mode fast (clients are disconnected, a
// checkpoint is written) or immediate (a crash: recovery at start).
func (p *privatePG) restart(mode string) error {
	return p.pgCtl("restart", "-m", mode)
}

// stop stops the server (mode fast or immediate); start starts it again.
func (p *privatePG) stop(mode string) error { return p.pgCtl("stop", "-m", mode) }
func (p *privatePG) start() error           { return p.pgCtl("start", "-o", p.opts) }

// pgCtl runs pg_ctl action; a server it starts logs to server.log (on
// pg_ctl's output it would hold the pipe open, and run would never return).
func (p *privatePG) pgCtl(action string, args ...string) error {
	all := []string{action, "-w", "-t", "120", "-D", p.data}
	if action == "start" || action == "restart" {
		all = append(all, "-l", filepath.Join(p.dir, "server.log"))
	}
	return p.run("pg_ctl", append(all, args...)...)
}

// run runs one of the server's programs, as postgres when we are root.
func (p *privatePG) run(name string, args ...string) error {
	path := filepath.Join(p.bin, name)
	cmd := exec.Command(path, args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	cmd.Dir = "/" // the postgres user may not enter the working directory
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %w\n%s", name, args, err, out)
	}
	return nil
}

// freePort is a TCP port nobody listens on now; the shared cluster's port
// is never one of them, since it is in use.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}

// holdTransaction keeps a transaction open on url for d: consumers wait
// for the xid horizon meanwhile (DESIGN §2), and must catch up after.
func holdTransaction(ctx context.Context, url string, d time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		return err
	}
	time.Sleep(d)
	return nil
}
