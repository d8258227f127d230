package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// The bench modes, in the order they run at each worker count. bare comes
// first: every other figure is a ratio to it.
const (
	modeBare        = "bare"
	modeStore       = "store"
	modeStoreCreate = "store+create"
	modeHTTP        = "http"
	modeHTTPBatch   = "http-batch"
	modeHTTPCreate  = "http-create"
	// modeRiver and modeRiverInsert are the peers, run by --river: not
	// modes of their own.
	modeRiver       = "river"
	modeRiverInsert = "river-insert"
)

var allModes = []string{modeBare, modeStore, modeStoreCreate, modeHTTP, modeHTTPBatch, modeHTTPCreate}

// drains reports whether a mode times claim + complete (every mode but
// http-create, which times creation).
func drains(mode string) bool { return mode != modeHTTPCreate }

// benchConfig is what the flags of `taskbench lanes` say.
type benchConfig struct {
	databaseURL string
	benchDB     string
	apiURL      string
	workers     []int
	modes       []string
	tasks       int
	duration    time.Duration
	jsonOut     bool
	cpuProfile  string
	batchSizes  []int
	createBatch int
	riverBin    string
}

// benchResult is one timed run: one mode at one worker count.
type benchResult struct {
	Mode    string `json:"mode"`
	Workers int    `json:"workers"`
	// Batch is http-batch's tasks per claim and per completion request.
	Batch       int     `json:"batch,omitempty"`
	Tasks       int     `json:"tasks"`
	Seconds     float64 `json:"seconds"`
	TasksPerSec float64 `json:"tasks_per_sec"`
	ClaimP50Ms  float64 `json:"claim_p50_ms"`
	ClaimP99Ms  float64 `json:"claim_p99_ms"`
	// EmptyClaims counts claims that found nothing (the drain's last ones,
	// or SKIP LOCKED races in store+create).
	EmptyClaims int `json:"empty_claims"`
	// CPU time per task of this process (workers, clients, in-process
	// server) and of the bench database's PostgreSQL backends (absent when
	// the server runs elsewhere). WAL writer and checkpointer not included.
	BenchCPUUsPerTask *float64 `json:"bench_cpu_us_per_task,omitempty"`
	PGCPUUsPerTask    *float64 `json:"pg_cpu_us_per_task,omitempty"`
	// Ratios to bare at the same worker count; absent when bare did not run.
	TasksPerSecVsBare *float64 `json:"tasks_per_sec_vs_bare,omitempty"`
	ClaimP50VsBare    *float64 `json:"claim_p50_vs_bare,omitempty"`
	ClaimP99VsBare    *float64 `json:"claim_p99_vs_bare,omitempty"`
	// TasksPerSecVsRiver is tasks/s divided by River's in the same round
	// (--river); absent without it.
	TasksPerSecVsRiver *float64 `json:"tasks_per_sec_vs_river,omitempty"`
}

// benchReport is the whole run, as --json prints it.
type benchReport struct {
	Started    time.Time     `json:"started"`
	Database   string        `json:"database"`
	API        string        `json:"api"`
	Postgres   string        `json:"postgres"`
	GoVersion  string        `json:"go_version"`
	NumCPU     int           `json:"num_cpu"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	Command    string        `json:"command"`
	Runs       []benchResult `json:"runs"`
}

const benchHelp = `Usage: taskbench lanes [flags]

Measures claim + complete throughput side by side, in one run, on one
scratch database, at each worker count:

  bare          claim + complete on worker_tasks with plain SQL and no events:
                the limit of this machine; every other line is a ratio to it
  store         store.DB.Claim then store.DB.CompleteTask: the real write
                path with events and projections, which batches concurrent
                claims and completions (docs/adr/008); tasks pre-created
  store+create  the same with store.DB.CreateTask inside the timed loop
                (create -> claim -> complete per task)
  http          the real API with one api/client per worker (each its own
                logged-in worker user): Claim, then Complete. The server
                runs in this process on 127.0.0.1:0 unless --api points at a
                running one.
  http-batch    the batched lane (docs/adr/016): each worker claims up to
                --batch-sizes tasks in one request (POST .../tasks/claims),
                then completes them in one request (.../tasks/completions);
                once per batch size. Its queue holds at least workers x
                batch x 5 tasks, so that the drain's tail stays short.
  http-create   creation, not a drain (docs/adr/018): each worker (an admin
                client) creates tasks --create-batch at a time through
                POST .../tasks/batch until the run's tasks exist; its
                "claim" latency is a batch request's. It creates at least
                workers x --create-batch x 3 tasks.

With --river PATH (scripts/riverbench, built by make bench), each round of
worker counts starts and ends with River's tuned burn-down (100 workers,
in-process, no HTTP, no events) on its own database of the same server, and
every drain of the round is also given as a ratio to the mean of those two.
With http-create, the round also starts and ends with River's InsertMany of
the same number of jobs, --create-batch a call, from as many goroutines as
the round has workers; http-create's ratio is to the mean of those two.

The queue is pre-filled before timing starts (bare: COPY; store, http:
store.CreateTask), and each run drains it, or stops at --duration. Runs with
fewer than 16 workers use tasks x workers / 16 tasks (at least 1000), so the
single-worker runs stay short.

The benchmark never touches your data: it drops and recreates its own
database (--bench-db, default taskservice_bench) on the server of
--database-url and migrates it. With --api, start that server on the bench
database (its DATABASE_URL naming --bench-db): the bench then keeps the
database and only empties the task tables between runs.

Progress goes to stderr; the table (or --json) to stdout.

Flags:
`

const benchExample = `
Example:
  DATABASE_URL=postgres://postgres@127.0.0.1:55432/taskservice?sslmode=disable \
    taskbench lanes --workers 1,16,64 --tasks 20000
  taskbench lanes --modes bare,http --workers 64 --duration 10s --json > bench.json
`

func runBench(args []string, stdout, stderr io.Writer) int {
	cfg, code := parseBenchFlags(args, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, err := bench(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "taskbench lanes: %v\n", err)
		return 1
	}
	report.Command = "taskbench lanes " + strings.Join(args, " ")
	return writeReport(stdout, stderr, "taskbench lanes", cfg.jsonOut, report, printBenchTable)
}

// writeReport writes a measurement's report to stdout: indented JSON, or
// the command's table.
func writeReport[R any](stdout, stderr io.Writer, name string, jsonOut bool, rep R, table func(io.Writer, R)) int {
	if !jsonOut {
		table(stdout, rep)
		return 0
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// parseBenchFlags returns the config, or an exit code >= 0 when the command
// should stop here (help or a usage error).
func parseBenchFlags(args []string, stderr io.Writer) (benchConfig, int) {
	fs := flag.NewFlagSet("taskbench lanes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg benchConfig
	var workers, modes string
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server to bench on (env DATABASE_URL); only its scratch database --bench-db is written")
	fs.StringVar(&cfg.benchDB, "bench-db", "taskservice_bench", "scratch database to drop, create and migrate")
	fs.StringVar(&cfg.apiURL, "api", "", "bench a running task-service at this base URL (it must use --bench-db) instead of an in-process one")
	fs.StringVar(&workers, "workers", "1,16,64", "comma-separated worker counts")
	fs.StringVar(&modes, "modes", strings.Join(allModes, ","), "comma-separated modes: "+strings.Join(allModes, ", "))
	fs.IntVar(&cfg.tasks, "tasks", 20000, "tasks per run at 16 or more workers (fewer workers: tasks x workers / 16, at least 1000)")
	fs.DurationVar(&cfg.duration, "duration", 0, "stop each run after this long even if its queue is not drained (0: drain)")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the results as JSON instead of a table")
	var batches string
	fs.StringVar(&batches, "batch-sizes", "10,100", "http-batch: tasks per claim and per completion request, comma-separated (1 to 100)")
	fs.IntVar(&cfg.createBatch, "create-batch", 1000, "http-create: tasks per batch request, and River's jobs per InsertMany (1 to 1000)")
	fs.StringVar(&cfg.riverBin, "river", "", "riverbench binary (go build in scripts/riverbench): run River's burn-down as the peer of every round")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of each timed run to PREFIX-MODE-WORKERS.pprof (the in-process server included)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchHelp)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), benchExample)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, 0
		}
		return cfg, 2
	}
	usageErr := func(format string, a ...any) (benchConfig, int) {
		fmt.Fprintf(stderr, "taskbench lanes: "+format+"\n", a...)
		return cfg, 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %q", fs.Args())
	}
	if cfg.databaseURL == "" {
		return usageErr("set DATABASE_URL or --database-url (scripts/devdb.sh prints one for a private cluster)")
	}
	if !validDBName(cfg.benchDB) {
		return usageErr("--bench-db %q: use lower-case letters, digits and _", cfg.benchDB)
	}
	for _, s := range strings.Split(workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1000 {
			return usageErr("--workers: %q is not a count between 1 and 1000", s)
		}
		cfg.workers = append(cfg.workers, n)
	}
	for _, s := range strings.Split(batches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100 {
			return usageErr("--batch-sizes: %q is not a size between 1 and 100", s)
		}
		cfg.batchSizes = append(cfg.batchSizes, n)
	}
	for _, m := range strings.Split(modes, ",") {
		m = strings.TrimSpace(m)
		if !contains(allModes, m) {
			return usageErr("--modes: unknown mode %q (know %s)", m, strings.Join(allModes, ", "))
		}
		if !contains(cfg.modes, m) {
			cfg.modes = append(cfg.modes, m)
		}
	}
	// Run in the canonical order so bare comes first at each worker count.
	ordered := cfg.modes[:0:0]
	for _, m := range allModes {
		if contains(cfg.modes, m) {
			ordered = append(ordered, m)
		}
	}
	cfg.modes = ordered
	if cfg.tasks < 1 {
		return usageErr("--tasks must be positive")
	}
	if cfg.createBatch < 1 || cfg.createBatch > 1000 {
		return usageErr("--create-batch must be from 1 to 1000")
	}
	if cfg.duration < 0 {
		return usageErr("--duration must not be negative")
	}
	return cfg, -1
}

// tasksFor is the queue size of a run with w workers.
func (cfg benchConfig) tasksFor(w int) int {
	if w >= 16 {
		return cfg.tasks
	}
	return min(cfg.tasks, max(1000, cfg.tasks*w/16))
}

// createTasksFor is the number of tasks http-create (and River's
// InsertMany beside it) creates with w clients: enough for three batch
// requests each, so that no client idles while the others work.
func (cfg benchConfig) createTasksFor(w int) int {
	return max(cfg.tasksFor(w), w*cfg.createBatch*3)
}

func validDBName(s string) bool {
	if s == "" || len(s) > 63 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// bench prepares the scratch database and runs every mode at every worker
// count, bare first at each.
func bench(ctx context.Context, cfg benchConfig, progress io.Writer) (*benchReport, error) {
	maxWorkers := 0
	for _, w := range cfg.workers {
		maxWorkers = max(maxWorkers, w)
	}
	env, err := openBenchEnv(ctx, cfg, maxWorkers, progress)
	if err != nil {
		return nil, err
	}
	defer env.close()
	report := &benchReport{
		Started: time.Now().UTC(), Database: cfg.benchDB, API: env.apiLabel(), Postgres: env.pgVersion,
		GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	peer := func(mode string, w int) (*benchResult, error) {
		var r *benchResult
		var err error
		if mode == modeRiverInsert {
			r, err = env.runRiverInsert(ctx, cfg.createTasksFor(w), cfg.createBatch, w)
		} else {
			r, err = env.runRiver(ctx, cfg.tasks)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode, err)
		}
		fmt.Fprintf(progress, "bench: %-15s %3d workers: %6d tasks in %6.2fs = %8.0f tasks/s\n",
			r.Mode, r.Workers, r.Tasks, r.Seconds, r.TasksPerSec)
		report.Runs = append(report.Runs, *r)
		return r, nil
	}
	// The peers of a round: River's burn-down for the drains, its
	// InsertMany for http-create.
	var peers []string
	if cfg.riverBin != "" {
		if slices.ContainsFunc(cfg.modes, drains) {
			peers = append(peers, modeRiver)
		}
		if contains(cfg.modes, modeHTTPCreate) {
			peers = append(peers, modeRiverInsert)
		}
	}
	for _, w := range cfg.workers {
		var bare *benchResult
		// Each peer runs at the start and at the end of each round, and
		// every line of the round is a ratio to the mean of its peer's
		// two: on a shared machine one run of the peer can land on a burst
		// of someone else's load.
		round := len(report.Runs)
		rates := map[string]float64{}
		for _, p := range peers {
			r, err := peer(p, w)
			if err != nil {
				return nil, err
			}
			rates[p] = r.TasksPerSec / 2
		}
		for _, m := range cfg.modes {
			batches := []int{0}
			switch m {
			case modeHTTPBatch:
				batches = cfg.batchSizes
			case modeHTTPCreate:
				batches = []int{cfg.createBatch}
			}
			for _, batch := range batches {
				n := cfg.tasksFor(w)
				switch m {
				case modeHTTPBatch:
					n = max(n, w*batch*5)
				case modeHTTPCreate:
					n = cfg.createTasksFor(w)
				}
				r, err := env.run(ctx, m, w, n, batch)
				if err != nil {
					return nil, fmt.Errorf("%s at %d workers: %w", m, w, err)
				}
				if m == modeBare {
					bare = r
				} else if bare != nil && drains(m) {
					r.TasksPerSecVsBare = ratio(r.TasksPerSec, bare.TasksPerSec)
					r.ClaimP50VsBare = ratio(r.ClaimP50Ms, bare.ClaimP50Ms)
					r.ClaimP99VsBare = ratio(r.ClaimP99Ms, bare.ClaimP99Ms)
				}
				fmt.Fprintf(progress, "bench: %-15s %3d workers: %6d tasks in %6.2fs = %8.0f tasks/s, claim p50 %.2f ms p99 %.2f ms\n",
					r.label(), r.Workers, r.Tasks, r.Seconds, r.TasksPerSec, r.ClaimP50Ms, r.ClaimP99Ms)
				report.Runs = append(report.Runs, *r)
			}
		}
		for _, p := range peers {
			r, err := peer(p, w)
			if err != nil {
				return nil, err
			}
			rates[p] += r.TasksPerSec / 2
		}
		for i := round; i < len(report.Runs); i++ {
			r := &report.Runs[i]
			switch {
			case r.Mode == modeHTTPCreate:
				r.TasksPerSecVsRiver = ratio(r.TasksPerSec, rates[modeRiverInsert])
			case drains(r.Mode) && r.Mode != modeRiverInsert && rates[modeRiver] > 0:
				r.TasksPerSecVsRiver = ratio(r.TasksPerSec, rates[modeRiver])
			}
		}
	}
	return report, nil
}

// label is the run's mode with its batch size, as the table prints it.
func (r benchResult) label() string {
	if r.Batch > 0 {
		return fmt.Sprintf("%s/%d", r.Mode, r.Batch)
	}
	return r.Mode
}

func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	r := a / b
	return &r
}

func printBenchTable(w io.Writer, rep *benchReport) {
	fmt.Fprintf(w, "taskbench lanes — %s, %s, %d CPUs (GOMAXPROCS %d), api %s\n\n",
		rep.Postgres, rep.GoVersion, rep.NumCPU, rep.GOMAXPROCS, rep.API)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tworkers\ttasks\ttasks/s\tx river\tx bare\tclaim p50 ms\tx bare\tclaim p99 ms\tx bare\tcpu us/task: bench\tpostgres\t")
	for _, r := range rep.Runs {
		p50, p99 := fmt.Sprintf("%.2f", r.ClaimP50Ms), fmt.Sprintf("%.2f", r.ClaimP99Ms)
		if r.Mode == modeRiver || r.Mode == modeRiverInsert {
			p50, p99 = "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.label(), r.Workers, r.Tasks, r.TasksPerSec,
			fmtOpt2(r.TasksPerSecVsRiver), fmtRatio(r, r.TasksPerSecVsBare), p50, fmtRatio(r, r.ClaimP50VsBare), p99, fmtRatio(r, r.ClaimP99VsBare),
			fmtOpt(r.BenchCPUUsPerTask), fmtOpt(r.PGCPUUsPerTask))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nx river: tasks/s divided by the mean of River's two burn-downs (http-create: River's two InsertMany runs), at the start and the end of the same round (--river; higher is better).")
	fmt.Fprintln(w, "x bare: the figure divided by bare's at the same worker count (tasks/s: higher is better; latency: lower is better).")
	fmt.Fprintln(w, "cpu us/task: CPU time per task of this process (workers, HTTP clients and the in-process server together; for river, the riverbench process) and of the database's backends.")
	fmt.Fprintln(w, "http-batch/N: claims and completions of up to N tasks per request; its claim latency is per claim request.")
	fmt.Fprintln(w, "store+create times create + claim + complete per task; http-create times creation alone, its claim latency is a batch request's; the other modes time claim + complete on a pre-filled queue.")
}

func fmtOpt2(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

func fmtRatio(r benchResult, v *float64) string {
	if r.Mode == modeRiver || r.Mode == modeRiverInsert {
		return "-"
	}
	if r.Mode == modeBare {
		return "1.00"
	}
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

func fmtOpt(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", *v)
}
