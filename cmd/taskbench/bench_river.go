package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// River is the peer the batched lane is measured against (ADR 016): its tuned burn-down, run by scripts/riverbench, a Go module of its
// own so that task-service never depends on River. The bench runs it as a
// child process on its own database of the same server, in the same run,
// and samples the child's CPU and its backends' exactly as its own.

// riverWorkers is the peer's MaxWorkers: River's burn-down as tuned.
const riverWorkers = 100

// maxBatch is the largest http-batch size, and so every bench worker's
// max_concurrent_tasks (the single-task modes never hold more than one).
const maxBatch = 100

// prepareRiver drops and recreates the peer's database, <bench-db>_river;
// riverbench migrates it.
func (env *benchEnv) prepareRiver(ctx context.Context) error {
	name := env.cfg.benchDB + "_river"
	adminURL, err := withDatabase(env.cfg.databaseURL, "postgres")
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to create %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{`DROP DATABASE IF EXISTS ` + ident + ` WITH (FORCE)`, `CREATE DATABASE ` + ident} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if env.riverURL, err = withDatabase(env.cfg.databaseURL, name); err != nil {
		return err
	}
	env.riverPool, err = samplerPool(ctx, env.riverURL)
	return err
}

// samplerPool opens a one-connection pool for sampling.
func samplerPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 1
	return pgxpool.NewWithConfig(ctx, cfg)
}

// runRiver runs riverbench's burn-down over n jobs and reports it as a run
// of its own.
func (env *benchEnv) runRiver(ctx context.Context, n int) (*benchResult, error) {
	fmt.Fprintf(env.progress, "bench: [river %dw] inserting %d jobs\n", riverWorkers, n)
	return env.riverbench(ctx, modeRiver, riverWorkers, "--jobs", strconv.Itoa(n), "--workers", strconv.Itoa(riverWorkers))
}

// runRiverInsert times riverbench's InsertMany of n jobs, batch a call, from
// workers goroutines: the peer of http-create.
func (env *benchEnv) runRiverInsert(ctx context.Context, n, batch, workers int) (*benchResult, error) {
	fmt.Fprintf(env.progress, "bench: [river-insert %dw] %d jobs, %d a call\n", workers, n, batch)
	return env.riverbench(ctx, modeRiverInsert, workers, "--mode", "insert", "--jobs", strconv.Itoa(n),
		"--batch", strconv.Itoa(batch), "--workers", strconv.Itoa(workers))
}

// riverbench runs the peer with args, times it between its ready and its
// answer, and reports it as a run of mode.
func (env *benchEnv) riverbench(ctx context.Context, mode string, workers int, args ...string) (_ *benchResult, err error) {
	cmd := exec.CommandContext(ctx, env.cfg.riverBin, append([]string{"--database-url", env.riverURL}, args...)...)
	cmd.Stderr = env.progress
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", env.cfg.riverBin, err)
	}
	defer func() {
		if err != nil {
			_ = cmd.Process.Kill()
		}
		_ = stdin.Close() // riverbench stops its client and exits
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	var ready struct{ Ready bool }
	if err := readLine(lines, &ready); err != nil || !ready.Ready {
		return nil, fmt.Errorf("riverbench did not get ready: %v", err)
	}
	sample := func() cpuSample {
		s := sampleCPU(ctx, env.riverPool)
		s.self, _ = procCPU(cmd.Process.Pid)
		return s
	}
	before := sample()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return nil, err
	}
	var res struct {
		Jobs    int     `json:"jobs"`
		Seconds float64 `json:"seconds"`
	}
	if err := readLine(lines, &res); err != nil {
		return nil, fmt.Errorf("riverbench: %w", err)
	}
	after := sample()
	r := &benchResult{Mode: mode, Workers: workers, Tasks: res.Jobs, Seconds: res.Seconds,
		TasksPerSec: float64(res.Jobs) / res.Seconds}
	cpuPerTask(r, before, after)
	return r, nil
}

// readLine decodes riverbench's next line of stdout, waiting 5 minutes at most.
func readLine(lines *bufio.Scanner, v any) error {
	got := make(chan error, 1)
	go func() {
		if !lines.Scan() {
			err := lines.Err()
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			got <- err
			return
		}
		got <- json.Unmarshal(lines.Bytes(), v)
	}()
	select {
	case err := <-got:
		return err
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("no answer from riverbench in 5 minutes")
	}
}
