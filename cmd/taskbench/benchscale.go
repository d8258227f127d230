package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/replay/replaytest"
)

const benchScaleHelp = `Usage: taskbench scale [flags]

Times every read an admin or a worker makes against databases of growing
history (issue 10): p50 and p99 per operation and per size, side by side.

Each size is its own database (taskservice_scale_10k, ...) on the server of
--database-url. It is built once from real events and kept: the synthetic
generator of store/replay/replaytest writes about 5.35 events per task (50
workers that never hold more than their max_concurrent_tasks, a second per
event, so a million tasks span about two months and the log ends now), then
` + "`taskctl replay`" + `'s rebuild makes the projections from them. Later runs reuse a
database whose build finished (--rebuild forces a new one). A million tasks
take several minutes to build on two cores; progress goes to stderr.

--profile busy builds the same sizes with the whole history in the last hour
(taskservice_scale_busy_10k, ...): a busy day, where a read that counts
"today" or "the last hour" meets every row. --backlog adds that many pending
tasks after the history, and --workers sizes the fleet (issue 24's busy day:
--profile busy --sizes 1m --backlog 1m --workers 1000, database
taskservice_scale_busy_1m_backlog_1m_w1000).

The reads run through the real HTTP API (an in-process server on the
database), one call at a time, after a warm-up call each: --calls rounds, each
of which calls every operation once, so a moment when the machine stalls
lands on several operations once each rather than on one operation's calls
in a row. The p99 of 60 calls is the second slowest (a p98); ask for 200 or
more for a p99 that is not the run's outliers alone.

Flags:
`

const benchScaleExample = `
Example:
  DATABASE_URL=postgres://postgres@127.0.0.1:55432/taskservice?sslmode=disable \
    taskbench scale --sizes 10k,100k,1m --calls 60
`

// benchScaleVersion names the generator's shape; a kept database built by
// another version is built again. 2: the log written by many transactions
// and moved into daily partitions, as a service would have it.
const benchScaleVersion = 2

type benchScaleConfig struct {
	databaseURL string
	sizes       []int
	calls       int
	rebuild     bool
	buildOnly   bool
	busy        bool
	backlog     int // pending tasks created after the history
	workers     int
	jsonOut     bool
	cpuProfile  string
}

func runBenchScale(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("taskbench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg benchScaleConfig
	var sizes, profile, backlog string
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server (env DATABASE_URL); only its taskservice_scale_* databases are written")
	fs.StringVar(&sizes, "sizes", "10k,100k,1m", "comma-separated task counts (k and m suffixes)")
	fs.StringVar(&profile, "profile", "spread", "spread: one event a second, so the log spans months; busy: the whole log in the last hour")
	fs.StringVar(&backlog, "backlog", "0", "pending tasks created after each size's history, unassigned (k and m suffixes): a deep queue")
	fs.IntVar(&cfg.workers, "workers", scaleWorkers, "workers in the synthetic fleet")
	fs.IntVar(&cfg.calls, "calls", 60, "timed calls per operation and size")
	fs.BoolVar(&cfg.rebuild, "rebuild", false, "build the databases again even when kept ones exist")
	fs.BoolVar(&cfg.buildOnly, "build-only", false, "build (or check) the databases and stop")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of each size's timed reads to PREFIX-SIZE.pprof (the in-process server included)")
	usage := func(w io.Writer) {
		fmt.Fprint(w, benchScaleHelp)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fmt.Fprint(w, benchScaleExample)
	}
	fs.Usage = func() {} // printed below: help on stdout, a usage error on stderr
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		usage(stderr)
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "taskbench scale: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %q", fs.Args())
	}
	if cfg.databaseURL == "" {
		return usageErr("set DATABASE_URL or --database-url (scripts/devdb.sh prints one for a private cluster)")
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := parseSize(strings.TrimSpace(s))
		if err != nil {
			return usageErr("--sizes: %v", err)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if backlog != "0" {
		n, err := parseSize(strings.TrimSpace(backlog))
		if err != nil {
			return usageErr("--backlog: %v", err)
		}
		cfg.backlog = n
	}
	if cfg.workers < 1 || cfg.workers > 100_000 {
		return usageErr("--workers must be between 1 and 100000")
	}
	switch profile {
	case "spread":
	case "busy":
		cfg.busy = true
	default:
		return usageErr("--profile: %q is not spread or busy", profile)
	}
	if cfg.calls < 2 {
		return usageErr("--calls must be at least 2")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The rebuild folds large logs; collecting less often is faster (as in
	// taskctl replay).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(replay.MemoryLimit))
	rep := &benchScaleReport{Command: "taskbench scale " + strings.Join(args, " ")}
	for _, n := range cfg.sizes {
		db, err := buildScaleDB(ctx, cfg, n, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "taskbench scale: %s: %v\n", sizeLabel(n), err)
			return 1
		}
		if cfg.buildOnly {
			continue
		}
		stop := func() {}
		if cfg.cpuProfile != "" {
			if stop, err = startCPUProfile(fmt.Sprintf("%s-%s.pprof", cfg.cpuProfile, sizeLabel(n)), stderr); err != nil {
				fmt.Fprintf(stderr, "taskbench scale: %v\n", err)
				return 1
			}
		}
		size, err := timeScaleReads(ctx, cfg, db, stderr)
		stop()
		if err != nil {
			fmt.Fprintf(stderr, "taskbench scale: %s: %v\n", sizeLabel(n), err)
			return 1
		}
		rep.Sizes = append(rep.Sizes, *size)
	}
	if cfg.buildOnly {
		return 0
	}
	return writeReport(stdout, stderr, "taskbench scale", cfg.jsonOut, rep, printScaleTable)
}

func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(strings.ToLower(s), "k"):
		mult, s = 1000, s[:len(s)-1]
	case strings.HasSuffix(strings.ToLower(s), "m"):
		mult, s = 1_000_000, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n*mult > 50_000_000 {
		return 0, fmt.Errorf("%q is not a task count between 1 and 50m", s)
	}
	return n * mult, nil
}

func sizeLabel(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// scaleDB is a built database: its URL and what it holds.
type scaleDB struct {
	tasks  int
	name   string
	url    string
	events int64
	built  time.Time
}

// scaleWorkers is the synthetic fleet; with caps 1 to 4 it has 125 slots,
// and as many tasks are in flight at once.
const (
	scaleWorkers = 50
	scaleActive  = 90
	scaleStep    = time.Second
)

// buildScaleDB returns the kept database for n tasks, building it first
// when it is missing, unfinished or of another generator version.
func buildScaleDB(ctx context.Context, cfg benchScaleConfig, n int, progress io.Writer) (*scaleDB, error) {
	db := &scaleDB{tasks: n, name: "taskservice_scale_" + sizeLabel(n)}
	if cfg.busy {
		db.name = "taskservice_scale_busy_" + sizeLabel(n)
	}
	if cfg.backlog > 0 {
		db.name += "_backlog_" + sizeLabel(cfg.backlog)
	}
	if cfg.workers != scaleWorkers {
		db.name += "_w" + strconv.Itoa(cfg.workers)
	}
	var err error
	if db.url, err = withDatabase(cfg.databaseURL, db.name); err != nil {
		return nil, err
	}
	adminURL, err := withDatabase(cfg.databaseURL, "postgres")
	if err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db.name).Scan(&exists); err != nil {
		return nil, err
	}
	if exists && !cfg.rebuild {
		if ok, err := db.kept(ctx); err != nil {
			return nil, err
		} else if ok {
			fmt.Fprintf(progress, "bench-scale: %s: using %s (%d events, built %s)\n", sizeLabel(n), db.name, db.events, db.built.Format(time.RFC3339))
			// A kept database still gets the migrations added since.
			return db, migrations.Up(ctx, db.url)
		}
	}
	name := pgx.Identifier{db.name}.Sanitize()
	fmt.Fprintf(progress, "bench-scale: %s: building %s\n", sizeLabel(n), db.name)
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		return nil, fmt.Errorf("drop %s: %w", db.name, err)
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		return nil, fmt.Errorf("create %s: %w", db.name, err)
	}
	if err := migrations.Up(ctx, db.url); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", db.name, err)
	}
	pool, err := store.Connect(ctx, db.url, 8)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	start := time.Now()
	evs := n * 535 / 100 // the generator writes about 5.35 events per task
	step := scaleStep
	if cfg.busy {
		step = time.Hour / time.Duration(evs+cfg.backlog)
	}
	seeded := make(chan struct{})
	go func() { // the COPYs say nothing until the last ends: estimate what they wrote
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-seeded:
				return
			case <-t.C:
				var est int64
				_ = pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(inhrelid)), 0) / 8192 * 20
					FROM pg_inherits WHERE inhparent = 'task_events'::regclass`).Scan(&est)
				fmt.Fprintf(progress, "bench-scale: %s: writing events, about %d of %d so far (%s)\n",
					sizeLabel(n), est, evs, time.Since(start).Round(time.Second))
			}
		}
	}()
	written, err := replaytest.Seed(ctx, pool, replaytest.Config{
		Events: evs, Workers: cfg.workers, Active: scaleActive, Seed: uint64(n), Backlog: cfg.backlog,
		Step: step, Start: time.Now().Add(-time.Duration(evs+cfg.backlog) * step),
	})
	close(seeded)
	if err != nil {
		return nil, fmt.Errorf("write events: %w", err)
	}
	fmt.Fprintf(progress, "bench-scale: %s: wrote %d events in %s; moving them into daily partitions\n",
		sizeLabel(n), written, time.Since(start).Round(time.Millisecond))
	// The events went to the default partition; a service's partition
	// maintenance moves a log's days out of it, as here (ADR 034).
	sdb, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		return nil, err
	}
	moveStart := time.Now()
	made := 0
	for try := 1; ; try++ {
		// A pass gives up on a partition when autovacuum holds the default
		// one past its lock timeout; the next pass goes on from there.
		prep, err := sdb.MaintainPartitions(ctx, store.PartitionPolicy{Kind: archive.Day, Ahead: 2})
		made += len(prep.Created)
		if err == nil {
			break
		}
		if try == 20 {
			return nil, err
		}
		fmt.Fprintf(progress, "bench-scale: %s: %v; again\n", sizeLabel(n), err)
		time.Sleep(time.Second)
	}
	fmt.Fprintf(progress, "bench-scale: %s: %d partitions made in %s; rebuilding the projections\n",
		sizeLabel(n), made, time.Since(moveStart).Round(time.Millisecond))
	rebuildStart := time.Now()
	rr, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{Progress: func(p replay.Progress) {
		if p.Done == p.Total || p.Done%(1<<20) == 0 {
			fmt.Fprintf(progress, "bench-scale: %s: rebuild %s %d/%d\n", sizeLabel(n), p.Phase, p.Done, p.Total)
		}
	}})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench-scale: %s: rebuilt %d tasks in %s; vacuuming\n",
		sizeLabel(n), rr.Rows["worker_tasks"], time.Since(rebuildStart).Round(time.Millisecond))
	if err := scaleLogins(ctx, pool); err != nil {
		return nil, err
	}
	// A live database has been vacuumed by autovacuum; a fresh one would
	// make the first reads pay for setting hint bits.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_scale_build (version int NOT NULL, tasks int NOT NULL, built_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO bench_scale_build (version, tasks) VALUES (`+strconv.Itoa(benchScaleVersion)+`, `+strconv.Itoa(n)+`)`); err != nil {
		return nil, fmt.Errorf("mark the build done: %w", err)
	}
	fmt.Fprintf(progress, "bench-scale: %s: built %s in %s\n", sizeLabel(n), db.name, time.Since(start).Round(time.Second))
	if _, err := db.kept(ctx); err != nil {
		return nil, err
	}
	return db, nil
}

// kept reports whether the database's build finished with this version.
func (db *scaleDB) kept(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", db.name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version int
	err = conn.QueryRow(ctx, `SELECT b.version, b.built_at, (SELECT count(*) FROM task_events)
		FROM bench_scale_build b WHERE to_regclass('bench_scale_build') IS NOT NULL`).Scan(&version, &db.built, &db.events)
	if err != nil {
		return false, nil // missing or unfinished: build again
	}
	return version == benchScaleVersion, nil
}

// The logins bench-scale uses. Secrets never enter the log (ADR 002), so
// the synthetic users get theirs here: an admin registered through the
// store (an event like any other) and a password for every worker.
const (
	scaleAdminEmail = "bench-scale-admin@example.com"
	scalePassword   = "bench-scale-password"
)

func scaleLogins(ctx context.Context, pool *pgxpool.Pool) error {
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(scalePassword), bcrypt.MinCost)
	if err != nil {
		return err
	}
	_, err = db.CreateUser(ctx, events.UserRegistered{Email: scaleAdminEmail, FullName: "Bench Scale Admin", IsAdmin: true},
		scalePassword, string(hash), events.Meta{Actor: events.System("bench-scale")})
	if err != nil {
		return fmt.Errorf("create the bench admin: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO user_credentials (user_id, password_hash)
		SELECT id, $1 FROM users WHERE is_worker ON CONFLICT (user_id) DO NOTHING`, string(hash)); err != nil {
		return fmt.Errorf("give the workers passwords: %w", err)
	}
	return nil
}
