package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// The wake paths bench-wake measures, in the order the table lists them.
const (
	wakeLocal  = "local"  // created on the instance the workers poll: the hub wakes them at commit
	wakeNotify = "notify" // created on another instance: its NOTIFY wakes the workers' instance
	wakeRunAt  = "run-at" // created with a run_at --run-at-lead ahead: the due timer wakes the workers when it comes
)

var allWakePaths = []string{wakeLocal, wakeNotify, wakeRunAt}

type wakeConfig struct {
	databaseURL    string
	benchDB        string
	workers        int
	tasks          int
	every          time.Duration
	max            int
	paths          []string
	notifyInterval time.Duration
	jsonOut        bool
	cpuProfile     string
	// service is the task-service binary each instance runs.
	service string
	// runAtLead is how far ahead the run-at path's tasks are due: longer
	// than a create takes, so each is scheduled before its time.
	runAtLead time.Duration
}

// wakeStats are percentiles of one latency, in milliseconds.
type wakeStats struct {
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// wakePathResult is one path's figures.
type wakePathResult struct {
	Path string `json:"path"`
	// Tasks created on this path (warm-up excluded) and how many of them a
	// worker received: always equal, or the bench fails.
	Tasks    int `json:"tasks"`
	Received int `json:"received"`
	// Create is the admin's POST /admin/tasks round trip.
	Create wakeStats `json:"create"`
	// FromSent: the create request leaving the admin client → the claim
	// answer carrying the task arriving at a worker. On the run-at path it
	// counts from the task's run_at instead.
	FromSent wakeStats `json:"from_sent"`
	// FromCreated: the create's answer arriving (its commit done) → the
	// same moment; negative when the worker had the task first.
	FromCreated wakeStats `json:"from_created"`
	// FromCommit: the create's commit, as PostgreSQL recorded it
	// (track_commit_timestamp), → the same moment: issue 24's measure.
	// When the server records no commit times (the report's commit_exact
	// false) it is FromCreated, which the commit precedes.
	FromCommit wakeStats `json:"from_commit"`
	// The server's own timestamps split FromSent in three: the request
	// reaching the create statement (the task's created_at), from there to
	// the claim statement that took it (started_at: the commit, the wake,
	// any batch it waited behind), and from there to the worker's hands
	// (the claim's statement and commit, the answer's way back).
	ToCreateStatement wakeStats `json:"to_create_statement"`
	ToClaimStatement  wakeStats `json:"create_to_claim_statement"`
	ToWorker          wakeStats `json:"claim_statement_to_worker"`
}

// wakeReport is the whole run, as --json prints it.
type wakeReport struct {
	Started          time.Time `json:"started"`
	Command          string    `json:"command"`
	Database         string    `json:"database"`
	Postgres         string    `json:"postgres"`
	GoVersion        string    `json:"go_version"`
	NumCPU           int       `json:"num_cpu"`
	GOMAXPROCS       int       `json:"gomaxprocs"`
	LoadBefore       string    `json:"load_average_before"`
	LoadAfter        string    `json:"load_average_after"`
	Workers          int       `json:"workers"`
	Max              int       `json:"max"`
	EveryMs          float64   `json:"every_ms"`
	NotifyIntervalMs float64   `json:"notify_interval_ms"`
	RunAtLeadMs      float64   `json:"run_at_lead_ms"`
	Warmup           int       `json:"warmup_tasks"`
	// CommitExact: from_commit counts from each create's commit time
	// (track_commit_timestamp on); else from the create's answer.
	CommitExact bool `json:"commit_exact"`
	// ClaimsPerTask: claim statements the workers' instance ran per timed
	// task (each wake of each waiting claim runs one, found or not).
	ClaimsPerTask float64 `json:"claims_per_task"`
	// WALBytesPerTask: WAL the server wrote per timed task, everything
	// included (create, claim, completion, empty claims' row locks).
	WALBytesPerTask float64 `json:"wal_bytes_per_task"`
	// CPU time per timed task of the bench's processes (this one, with the
	// workers and the admin client, and both task-service instances) and of
	// the database's backends, as in taskbench lanes.
	BenchCPUUsPerTask *float64 `json:"bench_cpu_us_per_task,omitempty"`
	PGCPUUsPerTask    *float64 `json:"pg_cpu_us_per_task,omitempty"`
	// Time per timed task that the same processes' threads and the database's
	// backends spent ready to run but waiting for a CPU (the machine's
	// other load shows here), summed over all of them.
	BenchRunWaitUsPerTask *float64         `json:"bench_run_wait_us_per_task,omitempty"`
	PGRunWaitUsPerTask    *float64         `json:"pg_run_wait_us_per_task,omitempty"`
	Paths                 []wakePathResult `json:"paths"`
}

const benchWakeHelp = `Usage: taskbench wake [flags]

Measures how long a new task takes to reach a long-polling worker through the
real HTTP API while the batched lane is otherwise idle (the goal: under 5 ms
at p99, docs/adr/016-batched-rest-lane.md).

--workers workers (each its own worker user and HTTP client) long-poll
POST /api/v1/worker/tasks/claims {max: --max, wait: 30} on one instance of the
server and complete what they get in one POST .../tasks/completions. An admin
client creates --tasks tasks one at a time, a gap of --every apart (drawn
uniformly between half and one and a half times it, so that arrivals do not
keep step with the NOTIFY interval), 25 on one path, then 25 on the next
(never overlapping: a local create would wake the workers for a task that
waits for its NOTIFY):

  local   created through the instance the workers poll: its commit wakes
          the waiting claims in-process (store.Hub, at once)
  notify  created through a second instance on the same database: the
          workers' instance hears of it through PostgreSQL NOTIFY/LISTEN,
          sent at once after a quiet moment (carried by the create's own
          transaction, delivered at its commit), else once per
          --notify-interval
  run-at  created through the workers' instance with a run_at --run-at-lead ahead:
          not claimable until then; the instance's due timer marks it due
          when it comes and wakes the waiting claims (the goal: under 50 ms
          at p99, docs/adr/017-queue-controls.md)

Per task it records when the create request left, when its answer came back
(the commit done) and when the claim answer carrying the task reached a
worker, and prints p50/p90/p99/max per path of:

  create             the create's own round trip
  sent -> worker     the create request leaving -> the task in a worker's hands
  run_at -> worker   (path run-at) the task's run_at -> the task in a worker's hands
  created -> worker  the create's answer -> the task in a worker's hands
                     (negative when the worker had it before the admin)
  commit -> worker   the create's commit, as PostgreSQL recorded it, -> the
                     task in a worker's hands; needs track_commit_timestamp =
                     on in the server, else it is created -> worker (and the
                     table says so)

and, from the server's own timestamps (created_at, started_at), where the
time went: request -> create statement, create statement -> the claim
statement that took it, claim statement -> the worker.

Each instance is a task-service process (--service), started on a loopback
port with a clean environment: the bench database, a shared JWT_SECRET,
NOTIFY_INTERVAL from --notify-interval, LOG_LEVEL=warn and every other setting
at its default, so it runs every reactor and timer a deployment runs. GOGC,
GOMEMLIMIT, GOMAXPROCS and GODEBUG pass through to it. The workers and the
admin client run in this process. The first tasks (a block of 25 per path, at
least 2 x --workers) warm the connections up and are not counted. Every task
must reach exactly one worker, once, or the bench fails.

The benchmark never touches your data: it drops and recreates its own
database (--bench-db) on the server of --database-url.

Progress goes to stderr; the table (or --json) to stdout.

Flags:
`

const benchWakeExample = `
Example:
  DATABASE_URL=postgres://postgres@127.0.0.1:55432/taskservice?sslmode=disable \
    taskbench wake --workers 8 --tasks 6000 --every 15ms
  taskbench wake --paths notify --notify-interval 5ms --json > wake.json
`

// defaultService is the task-service binary beside this one (make builds
// both into bin/), else the one on PATH; empty when there is neither.
func defaultService() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "task-service")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	p, _ := exec.LookPath("task-service")
	return p
}

func runBenchWake(args []string, stdout, stderr io.Writer) int {
	cfg, code := parseBenchWakeFlags(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := benchWake(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "taskbench wake: %v\n", err)
		return 1
	}
	rep.Command = "taskbench wake " + strings.Join(args, " ")
	return writeReport(stdout, stderr, "taskbench wake", cfg.jsonOut, rep, printWakeTable)
}

// parseBenchWakeFlags returns the config, or an exit code >= 0 when the
// command should stop here (help or a usage error).
func parseBenchWakeFlags(args []string, stdout, stderr io.Writer) (wakeConfig, int) {
	fs := flag.NewFlagSet("taskbench wake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg wakeConfig
	var paths string
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server to bench on (env DATABASE_URL); only its scratch database --bench-db is written")
	fs.StringVar(&cfg.benchDB, "bench-db", "taskservice_bench_wake", "scratch database to drop, create and migrate")
	fs.IntVar(&cfg.workers, "workers", 8, "workers long-polling at once")
	// A p99 needs a few thousand tasks a path to be steady: of 1,000 it is the
	// tenth slowest task, and runs of main differed by 2x (ADR 037).
	fs.IntVar(&cfg.tasks, "tasks", 6000, "timed tasks, shared out between the paths (2,000 a path by default, about 2 minutes)")
	fs.DurationVar(&cfg.every, "every", 15*time.Millisecond, "mean gap between two creates")
	fs.IntVar(&cfg.max, "max", 10, "max of each worker's claim-many (1 to 100)")
	fs.StringVar(&paths, "paths", strings.Join(allWakePaths, ","), "comma-separated paths: "+strings.Join(allWakePaths, ", "))
	fs.DurationVar(&cfg.notifyInterval, "notify-interval", 50*time.Millisecond, "spacing of a busy instance's NOTIFYs (task-service's NOTIFY_INTERVAL)")
	fs.DurationVar(&cfg.runAtLead, "run-at-lead", 250*time.Millisecond, "run-at path: how far ahead of its create each task's run_at is (longer than a create takes)")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the workers and the admin client) over the timed tasks to this file")
	fs.StringVar(&cfg.service, "service", defaultService(), "the task-service binary the instances run (default: task-service beside taskbench, else on PATH)")
	usage := func(w io.Writer) {
		fmt.Fprint(w, benchWakeHelp)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fmt.Fprint(w, benchWakeExample)
	}
	fs.Usage = func() {} // printed below: help on stdout, a usage error on stderr
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return cfg, 0
		}
		usage(stderr)
		return cfg, 2
	}
	usageErr := func(format string, a ...any) (wakeConfig, int) {
		fmt.Fprintf(stderr, "taskbench wake: "+format+"\n", a...)
		return cfg, 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case cfg.databaseURL == "":
		return usageErr("set DATABASE_URL or --database-url (scripts/devdb.sh prints one for a private cluster)")
	case !validDBName(cfg.benchDB):
		return usageErr("--bench-db %q: use lower-case letters, digits and _", cfg.benchDB)
	case cfg.workers < 1 || cfg.workers > 1000:
		return usageErr("--workers must be from 1 to 1000")
	case cfg.tasks < 1:
		return usageErr("--tasks must be positive")
	case cfg.every <= 0:
		return usageErr("--every must be positive")
	case cfg.max < 1 || cfg.max > 100:
		return usageErr("--max must be from 1 to 100")
	case cfg.notifyInterval <= 0:
		return usageErr("--notify-interval must be positive")
	}
	for _, p := range strings.Split(paths, ",") {
		p = strings.TrimSpace(p)
		if !contains(allWakePaths, p) {
			return usageErr("--paths: unknown path %q (know %s)", p, strings.Join(allWakePaths, ", "))
		}
		if !contains(cfg.paths, p) {
			cfg.paths = append(cfg.paths, p)
		}
	}
	if cfg.service == "" {
		return usageErr("no task-service binary beside taskbench or on PATH: build it (go build -o bin/ ./cmd/task-service) or pass --service")
	}
	return cfg, -1
}

func printWakeTable(w io.Writer, rep *wakeReport) {
	fmt.Fprintf(w, "taskbench wake — %s, %s, %d CPUs (GOMAXPROCS %d), load average %s → %s\n",
		rep.Postgres, rep.GoVersion, rep.NumCPU, rep.GOMAXPROCS, rep.LoadBefore, rep.LoadAfter)
	fmt.Fprintf(w, "%d workers long-polling claims {max: %d, wait: 30}; a task every %g ms on average; NOTIFY interval %g ms\n\n",
		rep.Workers, rep.Max, rep.EveryMs, rep.NotifyIntervalMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\ttasks\tms:\tp50\tp90\tp99\tmax\t")
	row := func(label string, s wakeStats) {
		fmt.Fprintf(tw, "\t\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", label, s.P50Ms, s.P90Ms, s.P99Ms, s.MaxMs)
	}
	for _, p := range rep.Paths {
		fmt.Fprintf(tw, "%s\t%d\t\t\t\t\t\t\n", p.Path, p.Tasks)
		if p.Path == wakeRunAt {
			row("run_at -> worker", p.FromSent)
		} else {
			row("sent -> worker", p.FromSent)
		}
		row("created -> worker", p.FromCreated)
		if p.Path != wakeRunAt {
			if rep.CommitExact {
				row("commit -> worker", p.FromCommit)
			} else {
				row("commit -> worker (= created)", p.FromCommit)
			}
		}
		row("create", p.Create)
		row("  request -> create stmt", p.ToCreateStatement)
		row("  create stmt -> claim stmt", p.ToClaimStatement)
		row("  claim stmt -> worker", p.ToWorker)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nPer timed task: %.1f claim statements on the workers' instance, %.0f bytes of WAL, CPU %s µs in the bench and task-service processes and %s µs in PostgreSQL.\n",
		rep.ClaimsPerTask, rep.WALBytesPerTask, fmtOpt(rep.BenchCPUUsPerTask), fmtOpt(rep.PGCPUUsPerTask))
	fmt.Fprintf(w, "Waiting for a CPU while ready to run, per timed task: %s µs in the bench and task-service processes, %s µs in PostgreSQL (all threads and backends summed).\n",
		fmtOpt(rep.BenchRunWaitUsPerTask), fmtOpt(rep.PGRunWaitUsPerTask))
	fmt.Fprintln(w, "\nsent -> worker: the create request leaving the admin client -> the claim answer carrying the task reaching a worker.")
	fmt.Fprintf(w, "run_at -> worker (path run-at): tasks created %g ms before their run_at; from the run_at to the same moment, woken by the due timer.\n",
		rep.RunAtLeadMs)
	fmt.Fprintln(w, "created -> worker: the create's answer (its commit done) -> the same moment; negative when the worker had the task first.")
	if rep.CommitExact {
		fmt.Fprintln(w, "commit -> worker: the create's commit time as PostgreSQL recorded it (track_commit_timestamp) -> the same moment.")
	} else {
		fmt.Fprintln(w, "commit -> worker: the server has track_commit_timestamp off, so this is created -> worker, which the commit precedes (ALTER SYSTEM SET track_commit_timestamp = on and restart PostgreSQL for the exact figure).")
	}
	fmt.Fprintln(w, "The indented lines split sent -> worker by the server's timestamps (the task's created_at and started_at).")
}

// loadAverage is the first three fields of /proc/loadavg, or "?".
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// newWakeReport fills what describes the run before it starts.
func newWakeReport(cfg wakeConfig, pgVersion string) *wakeReport {
	return &wakeReport{Started: time.Now().UTC(), Database: cfg.benchDB, Postgres: pgVersion,
		GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		LoadBefore: loadAverage(), Workers: cfg.workers, Max: cfg.max,
		EveryMs:          float64(cfg.every.Microseconds()) / 1000,
		NotifyIntervalMs: float64(cfg.notifyInterval.Microseconds()) / 1000,
		RunAtLeadMs:      float64(cfg.runAtLead.Microseconds()) / 1000,
		Warmup:           wakeWarmup(cfg)}
}

// wakeWarmup is how many untimed tasks open the connections first: whole
// blocks of every path, at least two per worker.
func wakeWarmup(cfg wakeConfig) int {
	round := wakeBlock * len(cfg.paths)
	return (2*cfg.workers + round - 1) / round * round
}
