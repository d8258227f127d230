package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// benchPassword is every bench user's password; the users live only in the
// scratch database.
const benchPassword = "bench-password"

// benchAdmin is the admin that creates tasks over HTTP (http-create's
// clients, bench-wake); the fixtures make it.
const benchAdmin = "bench-admin@bench.invalid"

// benchEnv is the scratch database with its fixtures (one task type, one
// worker user per concurrent worker) and, for the http mode, the server.
type benchEnv struct {
	cfg       benchConfig
	progress  io.Writer
	pgVersion string

	pool    *pgxpool.Pool // bare and store modes, fixtures, pre-fill
	db      *store.DB
	typeID  string
	workers []benchWorker

	apiBase    string
	httpServer *http.Server
	serverPool *pgxpool.Pool
	serveDone  chan error
	stopServer func() // ends the in-process server's background work

	riverURL  string        // --river: the peer's own database on the same server
	riverPool *pgxpool.Pool // reads the peer's backends for their CPU
}

type benchWorker struct{ id, email string }

func openBenchEnv(ctx context.Context, cfg benchConfig, maxWorkers int, progress io.Writer) (*benchEnv, error) {
	env := &benchEnv{cfg: cfg, progress: progress}
	benchURL, err := env.prepareDatabase(ctx)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, benchURL); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", cfg.benchDB, err)
	}
	// Enough connections that no worker waits for one: the pool must not be
	// what is measured.
	env.pool, err = store.Connect(ctx, benchURL, int32(maxWorkers+8))
	if err != nil {
		return nil, err
	}
	env.db, err = store.New(env.pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		env.close()
		return nil, err
	}
	if err := env.pool.QueryRow(ctx, `SELECT current_setting('server_version') || ' (fsync ' || current_setting('fsync')
		|| ', synchronous_commit ' || current_setting('synchronous_commit') || ')'`).Scan(&env.pgVersion); err != nil {
		env.close()
		return nil, fmt.Errorf("read server version: %w", err)
	}
	if err := env.fixtures(ctx, maxWorkers); err != nil {
		env.close()
		return nil, err
	}
	if cfg.riverBin != "" {
		if err := env.prepareRiver(ctx); err != nil {
			env.close()
			return nil, err
		}
	}
	if contains(cfg.modes, modeHTTP) || contains(cfg.modes, modeHTTPBatch) || contains(cfg.modes, modeHTTPCreate) {
		if err := env.startAPI(ctx, benchURL, maxWorkers); err != nil {
			env.close()
			return nil, err
		}
	}
	return env, nil
}

// prepareDatabase drops and recreates the scratch database (or, with --api,
// creates it only when missing, since the server is connected to it) and
// returns its URL.
func (env *benchEnv) prepareDatabase(ctx context.Context) (string, error) {
	cfg := env.cfg
	pcfg, err := pgx.ParseConfig(cfg.databaseURL)
	if err != nil {
		return "", fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	benchURL, err := withDatabase(cfg.databaseURL, cfg.benchDB)
	if err != nil {
		return "", err
	}
	adminURL := cfg.databaseURL
	if pcfg.Database == cfg.benchDB {
		// Cannot drop the database we are connected to.
		if adminURL, err = withDatabase(cfg.databaseURL, "postgres"); err != nil {
			return "", err
		}
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", pcfg.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := pgx.Identifier{cfg.benchDB}.Sanitize()
	if cfg.apiURL != "" {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, cfg.benchDB).Scan(&exists); err != nil {
			return "", fmt.Errorf("look for database %s: %w", cfg.benchDB, err)
		}
		if exists {
			fmt.Fprintf(env.progress, "bench: using the existing database %s (--api: the server is connected to it)\n", cfg.benchDB)
			return benchURL, nil
		}
	} else {
		fmt.Fprintf(env.progress, "bench: dropping and recreating the scratch database %s\n", cfg.benchDB)
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			return "", fmt.Errorf("drop database %s: %w", cfg.benchDB, err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", cfg.benchDB, err)
	}
	return benchURL, nil
}

// withDatabase points a URL or keyword/value connection string at another
// database on the same server.
func withDatabase(conn, name string) (string, error) {
	if strings.Contains(conn, "://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parse DATABASE_URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		if q := u.Query(); q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	return conn + " dbname=" + name, nil // a later keyword wins
}

// fixtures makes sure the task type and the worker users exist (they do
// already when --api reuses the database).
func (env *benchEnv) fixtures(ctx context.Context, n int) error {
	meta := events.Meta{Actor: events.System("bench")}
	err := env.pool.QueryRow(ctx, `SELECT id FROM task_types WHERE name = 'bench'`).Scan(&env.typeID)
	if errors.Is(err, pgx.ErrNoRows) {
		tt, cerr := env.db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "bench", Label: "Benchmark",
			SOP: "Nothing to do: complete at once.", ParamSchema: []byte(`{"type":"object"}`), MaxRetries: 0}, meta)
		if cerr != nil {
			return fmt.Errorf("create task type: %w", cerr)
		}
		env.typeID, err = tt.ID, nil
	}
	if err != nil {
		return fmt.Errorf("find task type: %w", err)
	}
	// bcrypt's minimum cost: logins are set-up, not what is measured.
	hash, err := bcrypt.GenerateFromPassword([]byte(benchPassword), bcrypt.MinCost)
	if err != nil {
		return err
	}
	var admin string
	err = env.pool.QueryRow(ctx, `SELECT id FROM users WHERE email = $1`, benchAdmin).Scan(&admin)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = env.db.CreateUser(ctx, events.UserRegistered{Email: benchAdmin, FullName: "Bench admin", IsAdmin: true},
			benchPassword, string(hash), meta)
	}
	if err != nil {
		return fmt.Errorf("bench admin: %w", err)
	}
	for i := 1; i <= n; i++ {
		w := benchWorker{email: fmt.Sprintf("bench-worker-%03d@bench.invalid", i)}
		err := env.pool.QueryRow(ctx, `SELECT id FROM users WHERE email = $1`, w.email).Scan(&w.id)
		if errors.Is(err, pgx.ErrNoRows) {
			u, cerr := env.db.CreateUser(ctx, events.UserRegistered{Email: w.email, FullName: fmt.Sprintf("Bench worker %d", i),
				IsWorker: true, MaxConcurrentTasks: maxBatch}, benchPassword, string(hash), meta)
			if cerr != nil {
				return fmt.Errorf("create worker %s: %w", w.email, cerr)
			}
			w.id, err = u.ID, nil
		}
		if err != nil {
			return fmt.Errorf("find worker %s: %w", w.email, err)
		}
		env.workers = append(env.workers, w)
	}
	return nil
}

// startAPI starts the real API server in this process on a loopback port,
// on its own pool, unless --api names a running one.
func (env *benchEnv) startAPI(ctx context.Context, benchURL string, maxWorkers int) error {
	if env.cfg.apiURL != "" {
		env.apiBase = strings.TrimRight(env.cfg.apiURL, "/")
		return nil
	}
	var err error
	env.serverPool, err = store.Connect(ctx, benchURL, int32(maxWorkers+8))
	if err != nil {
		return err
	}
	sdb, err := store.New(env.serverPool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	srv, err := api.New(api.Config{DB: sdb, Logger: zerolog.New(env.progress).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
		JWTSecret: []byte(hex.EncodeToString(secret)), BcryptCost: bcrypt.MinCost})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on loopback: %w", err)
	}
	// The server's background work, as task-service runs it: without it,
	// every request reads its user from the database (the auth cache
	// follows the log only while Run runs).
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = srv.Run(runCtx)
	}()
	env.stopServer = func() {
		stopRun()
		<-runDone
	}
	env.httpServer = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	env.serveDone = make(chan error, 1)
	go func() { env.serveDone <- env.httpServer.Serve(ln) }()
	env.apiBase = "http://" + ln.Addr().String()
	return nil
}

func (env *benchEnv) apiLabel() string {
	switch {
	case env.cfg.apiURL != "":
		return env.cfg.apiURL
	case env.httpServer != nil:
		return "in-process " + env.apiBase
	}
	return "not used"
}

func (env *benchEnv) close() {
	if env.httpServer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = env.httpServer.Shutdown(ctx)
		cancel()
		<-env.serveDone
	}
	if env.stopServer != nil {
		env.stopServer()
	}
	if env.serverPool != nil {
		env.serverPool.Close()
	}
	if env.pool != nil {
		env.pool.Close()
	}
	if env.riverPool != nil {
		env.riverPool.Close()
	}
}

// reset empties the task tables so every run starts from the same state,
// then vacuums and checkpoints so no run pays for an earlier one's garbage.
// It does not ANALYZE the emptied tables: statistics that say "empty" make
// the planner cost every index path at zero, and plans made then (the
// store+create runs start from an empty queue) chose indexes at random,
// reading up to 34 million index entries a run. TRUNCATE leaves them
// unknown, as on a fresh install, where the planner assumes a small table
// rather than none. Pre-filled runs ANALYZE after the pre-fill.
func (env *benchEnv) reset(ctx context.Context) error {
	for _, q := range []string{
		`TRUNCATE worker_tasks, task_counts, pending_counts, task_titles, task_assignments, worker_task_updates`,
		`DELETE FROM task_events WHERE stream_type = 'task'`,
		`VACUUM task_events, users`,
	} {
		if _, err := env.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset: %s: %w", q, err)
		}
	}
	// CHECKPOINT needs superuser (or pg_checkpoint); without it a run may
	// meet a checkpoint and be a little slower.
	_, _ = env.pool.Exec(ctx, `CHECKPOINT`)
	return nil
}

// prefillStore creates n tasks through store.CreateTask, in transactions of
// a few hundred so the untimed set-up does not pay one commit per task.
func (env *benchEnv) prefillStore(ctx context.Context, n int) error {
	const perTx, parallel = 250, 4
	meta := events.Meta{Actor: events.System("bench")}
	jobs := make(chan [2]int)
	errc := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				err := env.db.WithTx(ctx, func(tx pgx.Tx) error {
					for i := j[0]; i < j[1]; i++ {
						if _, err := env.db.CreateTask(ctx, tx, env.newTask(i), meta); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errc <- fmt.Errorf("pre-fill: %w", err)
					return
				}
			}
		}()
	}
	var err error
send:
	for i := 0; i < n; i += perTx {
		select {
		case jobs <- [2]int{i, min(n, i+perTx)}:
		case err = <-errc:
			break send
		}
	}
	close(jobs)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err = <-errc:
		return err
	default:
	}
	return env.analyze(ctx)
}

// analyze refreshes the planner's statistics after a pre-fill, as
// autovacuum would on a live queue: plans chosen on the empty table's
// statistics (and cached per connection) would measure a state no real
// queue is in.
func (env *benchEnv) analyze(ctx context.Context) error {
	if _, err := env.pool.Exec(ctx, `ANALYZE worker_tasks, task_events, users`); err != nil {
		return fmt.Errorf("pre-fill: analyze: %w", err)
	}
	return nil
}

func (env *benchEnv) newTask(i int) store.NewTaskParams {
	return store.NewTaskParams{TaskTypeID: env.typeID, NewTaskParams: events.NewTaskParams{
		Title: fmt.Sprintf("bench task %d", i), Params: []byte(fmt.Sprintf(`{"n":%d}`, i)), Priority: events.PriorityMedium}}
}

// prefillBare copies n pending rows straight into worker_tasks, in queue
// order, with no events: what the bare loop works on.
func (env *benchEnv) prefillBare(ctx context.Context, n int) error {
	base := time.Now().UTC().Add(-time.Hour)
	rows := make([][]any, n)
	for i := range rows {
		at := base.Add(time.Duration(i) * time.Microsecond)
		rows[i] = []any{newUUID(), fmt.Sprintf("bench task %d", i), env.typeID, fmt.Sprintf(`{"n":%d}`, i), "medium", "pending", at, at, at, 1}
	}
	_, err := env.pool.CopyFrom(ctx, pgx.Identifier{"worker_tasks"},
		[]string{"id", "title", "task_type_id", "params", "priority", "status", "created_at", "updated_at", "available_at", "version"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("pre-fill: copy: %w", err)
	}
	return env.analyze(ctx)
}

// verifyCreated checks an http-create run: exactly done tasks, each with
// one task.created, all pending in task_counts.
func (env *benchEnv) verifyCreated(ctx context.Context, done int) error {
	var tasks, created, pending int
	if err := env.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM worker_tasks),
		(SELECT count(*) FROM task_events WHERE type = 'task.created'),
		(SELECT coalesce(sum(pending), 0) FROM task_counts)`).Scan(&tasks, &created, &pending); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if tasks != done || created != done || pending != done {
		return fmt.Errorf("verify: created %d tasks but the table has %d, the log %d task.created and task_counts %d pending",
			done, tasks, created, pending)
	}
	return nil
}

// verify checks what a run claims it did against the tables: every counted
// task is completed exactly once, none is left in progress, and the event
// modes appended exactly one claimed and one completed event per task and
// kept task_counts exact.
func (env *benchEnv) verify(ctx context.Context, mode string, done int) error {
	var completed, inProgress int
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'),
		count(*) FILTER (WHERE status = 'in_progress') FROM worker_tasks`).Scan(&completed, &inProgress); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if completed != done || inProgress != 0 {
		return fmt.Errorf("verify: counted %d completions but the table has %d completed and %d in progress", done, completed, inProgress)
	}
	if mode == modeBare {
		return nil
	}
	var claimed, completedEvents, assignments int
	if err := env.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM task_events WHERE type = 'task.claimed'),
		(SELECT count(*) FROM task_events WHERE type = 'task.completed'),
		(SELECT count(*) FROM task_assignments WHERE kind = 'claimed')`).Scan(&claimed, &completedEvents, &assignments); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if claimed != done || completedEvents != done || assignments != done {
		return fmt.Errorf("verify: %d tasks completed but %d task.claimed, %d task.completed events and %d claim assignments",
			done, claimed, completedEvents, assignments)
	}
	// The writers keep task_counts in their own statements (ADR 010); the
	// bare loop writes none, so only the event modes are held to it.
	var want, got [3]int64
	if err := env.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM worker_tasks WHERE status = 'pending'), $1::bigint, 0,
		(SELECT coalesce(sum(pending), 0) FROM task_counts), (SELECT coalesce(sum(completed), 0) FROM task_counts),
		(SELECT coalesce(sum(in_progress), 0) FROM task_counts)`, done).
		Scan(&want[0], &want[1], &want[2], &got[0], &got[1], &got[2]); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if got != want {
		return fmt.Errorf("verify: task_counts says %d pending, %d completed, %d in progress; the tasks say %d, %d, %d",
			got[0], got[1], got[2], want[0], want[1], want[2])
	}
	return nil
}
