package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// The database moves to a new cluster under a running fleet: with
// pg_upgrade (the transaction counter goes on) and with a logical dump and
// restore (it starts afresh, and the service refuses to write until the
// operator moves it past the stored ids). Each starts private clusters and
// restarts the service a few times: minutes on a loaded machine, so they
// run in make test-slow only.
const movesWhy = "moves the database between private PostgreSQL clusters and restarts the service, minutes"

// moveFixture is one instance on a private cluster with history worth
// keeping: a failure retried before the move (it must not be retried
// again), a failure the reactors have not seen yet (it must be retried
// once after), and a live tail that follows the log throughout.
type moveFixture struct {
	t        *testing.T
	pg       *privatePG
	in       *instance
	c        *cluster
	tt       *events.TaskType
	w        *clusterWorker
	tail     *followingTail
	failed   []string // failed before the move
	lastSeen string   // the last task the tail delivered before the move
	before   map[string]string
}

func newMoveFixture(t *testing.T) *moveFixture {
	ctx := context.Background()
	pg := startPrivatePG(t)
	// A fresh cluster's counter is a few hundred, about what a fresh
	// cluster reaches by the end of a restore or pg_upgrade: one lost in
	// the move could go unnoticed. In the counter's second epoch (ids above
	// 2^32) it cannot.
	require.NoError(t, pg.stop("fast"))
	require.NoError(t, pg.run("pg_resetwal", "-e", "1", "-D", pg.data))
	require.NoError(t, pg.start())
	ins := startInstances(t, pg.url, 1)
	require.False(t, t.Failed())
	hc := checkedHTTP(t, ins[0].base, &http.Transport{MaxIdleConnsPerHost: 16})
	admin := client.New(ins[0].base, hc)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	c := &cluster{t: t, ctx: ctx, ins: ins, admin: admin, hc: hc}
	c.pool = connectPool(t, pg.url)
	f := &moveFixture{t: t, pg: pg, in: ins[0], c: c}
	retries := 1
	f.tt, err = admin.CreateTaskType(ctx, client.NewTaskType{Name: "move", MaxRetries: &retries})
	require.NoError(t, err)
	f.w = c.worker("mover", 10)
	f.tail = openFollowingTail(t, admin)

	retried := f.failOne("failed and retried before the move")
	c.requireOneRetryEach([]string{retried})

	// A failure the reactors have not handled when the database moves:
	// the instance runs without them for it.
	f.restart(func() { f.in.env = append(f.in.env, "REACTORS=false") })
	unseen := f.failOne("failed with the reactors off before the move")
	f.failed = []string{retried, unseen}
	last, err := admin.CreateTask(ctx, client.NewTask{Title: "the last before the move", TaskTypeID: f.tt.ID})
	require.NoError(t, err)
	c.eventually("the tail to deliver the last task before the move", func() bool { return f.tail.has(last.ID) })
	f.lastSeen = last.ID
	f.before = f.checkpoints()
	require.NotEmpty(t, f.before)
	require.Zero(t, c.count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id = $1`, unseen))
	f.in.stop(syscall.SIGTERM)
	c.pool.Close()
	return f
}

func connectPool(t *testing.T, url string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// failOne creates a task for the worker, which claims and fails it.
func (f *moveFixture) failOne(title string) string {
	task, err := f.c.admin.CreateTask(f.c.ctx, client.NewTask{Title: title, TaskTypeID: f.tt.ID, AssignedTo: f.w.id})
	require.NoError(f.t, err)
	f.c.claimAndFail(f.w, 0, task.ID)
	return task.ID
}

// restart stops the instance, lets change edit its settings, and starts it.
func (f *moveFixture) restart(change func()) {
	f.in.stop(syscall.SIGTERM)
	change()
	f.in.start()
	require.False(f.t, f.t.Failed())
}

// checkpoints reads every reactor's stored position.
func (f *moveFixture) checkpoints() map[string]string {
	rows, err := f.c.pool.Query(f.c.ctx, `SELECT name, tx_id::text || '/' || seq FROM reactor_checkpoints`)
	require.NoError(f.t, err)
	out := map[string]string{}
	for rows.Next() {
		var name, pos string
		require.NoError(f.t, rows.Scan(&name, &pos))
		out[name] = pos
	}
	require.NoError(f.t, rows.Err())
	return out
}

// resumeOn starts the instance, with the reactors, on the database at url
// (the moved one), and checks that everything goes on from where it was.
func (f *moveFixture) resumeOn(url string) {
	t, c := f.t, f.c
	c.pool = connectPool(t, url)
	require.Equal(t, f.before, f.checkpoints(), "the reactors' positions changed in the move")
	f.in.env = append(slices.DeleteFunc(f.in.env, func(kv string) bool {
		return strings.HasPrefix(kv, "REACTORS=") || strings.HasPrefix(kv, "DATABASE_URL=")
	}), "DATABASE_URL="+url)
	f.in.start()
	require.False(t, t.Failed())

	// The reactors go on from their positions: the failure they had not
	// seen is retried once, the one retried before is not retried again,
	// and a failure after the move is retried once.
	after := f.failOne("failed after the move")
	c.requireOneRetryEach(append(slices.Clone(f.failed), after))

	// The tail reconnects and delivers every event after the last one it
	// had before the move.
	created, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "created after the move", TaskTypeID: f.tt.ID})
	require.NoError(t, err)
	c.eventually("the tail to deliver a task created after the move", func() bool { return f.tail.has(created.ID) })
	n := 0
	for q := (client.EventQuery{After: f.tail.positionOf(f.lastSeen), Limit: 500}); ; {
		page, err := c.admin.Events(c.ctx, q)
		require.NoError(t, err)
		for _, e := range page.Events {
			require.True(t, f.tail.delivered(e), "the tail lost %s %s at %s", e.Type, e.StreamID, e.Position)
			n++
		}
		if len(page.Events) < q.Limit {
			break
		}
		q.After = page.Next
	}
	require.Positive(t, n)
	t.Logf("the tail delivered all %d events after the move (%d reconnects)", n, f.tail.reconnects.Load())

	out, err := taskctl(t, url, "replay", "--verify")
	require.NoError(t, err, out)
	t.Logf("taskctl replay --verify: %s", lastLine(out))
}

// taskctl builds taskctl once per test and runs it on url.
func taskctl(t *testing.T, url string, args ...string) (string, error) {
	bin := filepath.Join(t.TempDir(), "taskctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../taskctl").CombinedOutput(); err != nil {
		return string(out), fmt.Errorf("build taskctl: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = baseEnv("DATABASE_URL=" + url)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pg_upgrade (scripts/pg-upgrade.sh, the steps docs/deploy.md gives) into a
// new cluster on the same port: the transaction counter, and so every
// stored position, goes on. This machine has one major (15), so the
// upgrade is 15 to 15; the steps are the same across majors.
func TestPgUpgradeKeepsPositions(t *testing.T) {
	slowTests(t, movesWhy)
	f := newMoveFixture(t)
	require.NoError(t, f.pg.stop("fast"))

	script, err := filepath.Abs("../../scripts/pg-upgrade.sh")
	require.NoError(t, err)
	newData := filepath.Join(f.pg.dir, "data-upgraded")
	cmd := exec.Command("runuser", "-u", "postgres", "--", script, f.pg.data, newData)
	if os.Geteuid() != 0 {
		cmd = exec.Command(script, f.pg.data, newData)
	}
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "OLD_BIN="+f.pg.bin, "NEW_BIN="+f.pg.bin, fmt.Sprintf("UPGRADE_PORT=%d", freePort(t)),
		"INITDB_FLAGS=-E UTF8 --auth=trust --no-sync")
	began := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("scripts/pg-upgrade.sh took %v:\n%s", time.Since(began).Round(time.Millisecond), out)
	require.Contains(t, string(out), "next transaction id (epoch:xid)")

	f.pg.data = newData
	require.NoError(t, f.pg.start())
	f.resumeOn(f.pg.url)
}

var resetwalEpoch = regexp.MustCompile(`pg_resetwal -e (\d+) -D <data directory>`)

// A logical dump restored into a new cluster: its transaction counter
// starts below the ids the events and checkpoints carry. The service
// refuses to start, writing nothing, and names the command that moves the
// counter past them; after it, everything goes on as after pg_upgrade.
func TestLogicalRestoreIsRefusedUntilTheCounterMoves(t *testing.T) {
	slowTests(t, movesWhy)
	f := newMoveFixture(t)
	ctx := context.Background()
	dump := filepath.Join(t.TempDir(), "taskservice.dump")
	out, err := exec.Command(filepath.Join(f.pg.bin, "pg_dump"), "-Fc", "-f", dump, f.pg.url).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, f.pg.stop("fast"))
	restored := startPrivatePG(t)
	out, err = exec.Command(filepath.Join(f.pg.bin, "pg_restore"), "--exit-on-error", "-d", restored.url, dump).CombinedOutput()
	require.NoError(t, err, "%s", out)

	pool := connectPool(t, restored.url)
	var stored, next, events int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT tx_id FROM task_events ORDER BY tx_id DESC LIMIT 1)::text::bigint,
		pg_current_xact_id()::text::bigint, (SELECT count(*) FROM task_events)`).Scan(&stored, &next, &events))
	t.Logf("restored: the log's greatest transaction id %d, the new cluster's next %d", stored, next)
	require.Greater(t, stored, next, "the restored cluster's counter is past the log already: this test shows nothing")

	env := append(slices.DeleteFunc(slices.Clone(f.in.env), func(kv string) bool {
		return strings.HasPrefix(kv, "DATABASE_URL=")
	}), "DATABASE_URL="+restored.url)
	code, logs := runCmd(t, env)
	require.NotZero(t, code, logs)
	require.Contains(t, logs, "restored from a logical dump")
	m := resetwalEpoch.FindStringSubmatch(logs)
	require.NotNil(t, m, logs)
	var after int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events`).Scan(&after))
	require.Equal(t, events, after, "the refused start wrote events")
	pool.Close()

	// The recovery docs/deploy.md gives: stop the server, move the
	// counter's epoch, start it.
	require.NoError(t, restored.stop("fast"))
	require.NoError(t, restored.run("pg_resetwal", "-e", m[1], "-D", restored.data))
	require.NoError(t, restored.start())
	f.resumeOn(restored.url)
}
