// Command riverbench is the peer that `taskbench lanes --river` measures
// task-service against: River's burn-down with the settings River's own
// benchmark tunes (a 2 ms fetch cooldown, a 20 ms poll interval, no-op
// jobs), in-process, with no HTTP and no events, on the same PostgreSQL in
// the same run. It is its own Go module so that task-service never depends
// on River.
//
// It speaks a small line protocol with the bench on stdin and stdout, so the
// bench can sample this process's CPU and its PostgreSQL backends exactly
// around the timed part:
//
//	riverbench -> {"ready":true}        jobs inserted, connections open
//	bench      -> go
//	riverbench -> {"jobs":N,"seconds":S} every job worked
//	bench      -> (closes stdin)        riverbench stops and exits
//
// With --mode insert it measures River's InsertMany instead, the peer of
// the bench's batch-create lane: --workers goroutines insert --jobs jobs in
// batches of --batch, timed between the same go and answer lines.
//
// Progress goes to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "riverbench: %v\n", err)
		os.Exit(1)
	}
}

// noopArgs is the job: nothing to do, as task-service's bench tasks.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func run() error {
	url := flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL database for River's tables (it is migrated and its jobs table emptied)")
	jobs := flag.Int("jobs", 20000, "jobs to insert, then work down")
	workers := flag.Int("workers", 100, "River's MaxWorkers for the queue (burn-down), or concurrent inserters (insert)")
	mode := flag.String("mode", "burn-down", "burn-down: work the jobs down; insert: time InsertMany")
	batch := flag.Int("batch", 1000, "insert: jobs per InsertMany call")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: riverbench --database-url URL [--mode burn-down|insert] [--jobs N] [--workers N] [--batch N]\n\n"+
			"River's tuned burn-down or its InsertMany, driven by taskbench lanes --river (see the package doc).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *url == "" {
		return errors.New("set --database-url or DATABASE_URL")
	}
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(*url)
	if err != nil {
		return err
	}
	if *mode == "insert" {
		// A connection per inserter, as the bench's server has per worker.
		pcfg.MaxConns = int32(*workers + 4)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}

	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers:           ws,
	})
	if err != nil {
		return err
	}
	if *mode == "insert" {
		return timeInserts(ctx, client, pool, *jobs, *batch, *workers)
	}
	if *mode != "burn-down" {
		return fmt.Errorf("--mode %q: burn-down or insert", *mode)
	}
	if err := insert(ctx, client, *jobs); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `ANALYZE river_job`); err != nil {
		return err
	}
	// Open the connections the run will use, so their start-up is not timed.
	var conns []*pgxpool.Conn
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}

	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: *jobs + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancel()

	stdin := bufio.NewReader(os.Stdin)
	say(map[string]any{"ready": true})
	if line, err := stdin.ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("expected go on stdin, got %q (%v)", line, err)
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	var last time.Time
	for done := 0; done < *jobs; done++ {
		select {
		case ev := <-completed:
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d ended as %s", ev.Job.ID, ev.Kind)
			}
			last = time.Now()
		case <-time.After(time.Minute):
			return fmt.Errorf("no job finished for a minute (%d of %d done)", done, *jobs)
		}
	}
	say(map[string]any{"jobs": *jobs, "seconds": last.Sub(start).Seconds()})
	_, _ = io.Copy(io.Discard, stdin) // the bench samples CPU, then closes stdin

	stopCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	return client.Stop(stopCtx)
}

// insert adds n jobs in batches, untimed.
func insert(ctx context.Context, client *river.Client[pgx.Tx], n int) error {
	const batch = 5000
	params := make([]river.InsertManyParams, 0, batch)
	for i := 0; i < n; i += batch {
		params = params[:0]
		for j := i; j < min(n, i+batch); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: j}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert jobs: %w", err)
		}
	}
	return nil
}

func say(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// timeInserts times workers goroutines inserting n jobs with InsertMany, in
// batches of batch, between the bench's go and the answer line; the jobs
// are never worked.
func timeInserts(ctx context.Context, client *river.Client[pgx.Tx], pool *pgxpool.Pool, n, batch, workers int) error {
	var conns []*pgxpool.Conn
	for range min(workers, int(pool.Config().MaxConns)) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	stdin := bufio.NewReader(os.Stdin)
	say(map[string]any{"ready": true})
	if line, err := stdin.ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("expected go on stdin, got %q (%v)", line, err)
	}
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			params := make([]river.InsertManyParams, 0, batch)
			for {
				first := int(next.Add(int64(batch))) - batch
				if first >= n {
					return
				}
				params = params[:0]
				for j := first; j < min(n, first+batch); j++ {
					params = append(params, river.InsertManyParams{Args: noopArgs{N: j}})
				}
				if _, err := client.InsertMany(ctx, params); err != nil {
					errs <- fmt.Errorf("insert jobs: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	var count int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&count); err != nil {
		return err
	}
	if count != n {
		return fmt.Errorf("inserted %d jobs, want %d", count, n)
	}
	say(map[string]any{"jobs": n, "seconds": elapsed.Seconds()})
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}
