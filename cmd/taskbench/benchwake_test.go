package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestBenchWake runs bench-wake small on its own scratch database: two
// task-service processes built from this tree, every path. The bench fails
// by itself unless every task reached exactly one worker once; here the
// figures must be sane.
func TestBenchWake(t *testing.T) {
	service := filepath.Join(t.TempDir(), "task-service")
	out, err := exec.Command("go", "build", "-o", service, "../task-service").CombinedOutput()
	require.NoError(t, err, "%s", out)
	base, dbName := scratchBenchDB(t, "taskservice_bench_wake_test_")

	var stdout, stderr bytes.Buffer
	code := runBenchWake([]string{"--database-url", base, "--bench-db", dbName, "--workers", "3", "--tasks", "75",
		"--every", "2ms", "--max", "2", "--run-at-lead", "3s", "--service", service, "--json"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var rep wakeReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	require.Equal(t, 3, rep.Workers)
	require.Equal(t, 2, rep.Max)
	require.Equal(t, 75, rep.Warmup, "a block of 25 per path")
	require.Len(t, rep.Paths, 3)
	for i, want := range map[int]struct {
		path  string
		tasks int
	}{0: {wakeLocal, 25}, 1: {wakeNotify, 25}, 2: {wakeRunAt, 25}} {
		p := rep.Paths[i]
		require.Equal(t, want.path, p.Path)
		require.Equal(t, want.tasks, p.Tasks, p.Path)
		require.Equal(t, p.Tasks, p.Received, "%s: every task reached a worker", p.Path)
		for name, s := range map[string]wakeStats{"create": p.Create, "from sent": p.FromSent, "claim statement to worker": p.ToWorker} {
			require.Positive(t, s.P50Ms, "%s %s", p.Path, name)
			require.LessOrEqual(t, s.P50Ms, s.P90Ms, "%s %s", p.Path, name)
			require.LessOrEqual(t, s.P90Ms, s.P99Ms, "%s %s", p.Path, name)
			require.LessOrEqual(t, s.P99Ms, s.MaxMs, "%s %s", p.Path, name)
		}
		if p.Path == wakeRunAt {
			// Created well before its run_at (a lead that a loaded machine's
			// creates stay within): the worker gets it after the lead, not at once.
			require.GreaterOrEqual(t, p.FromCreated.P50Ms, p.FromSent.P50Ms, p.Path)
			require.Greater(t, p.ToClaimStatement.P50Ms, rep.RunAtLeadMs/2, p.Path)
		} else {
			require.GreaterOrEqual(t, p.FromSent.P50Ms, p.FromCreated.P50Ms, p.Path)
			// The commit falls between the request leaving and its answer.
			require.GreaterOrEqual(t, p.FromSent.P50Ms, p.FromCommit.P50Ms, p.Path)
			require.GreaterOrEqual(t, p.FromCommit.P50Ms, p.FromCreated.P50Ms, p.Path)
			if !rep.CommitExact {
				require.Equal(t, p.FromCreated, p.FromCommit, "%s: without commit times, from the answer", p.Path)
			}
		}
	}
	conn, err := pgx.Connect(context.Background(), base)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var tracked string
	require.NoError(t, conn.QueryRow(context.Background(), `SHOW track_commit_timestamp`).Scan(&tracked))
	require.Equal(t, tracked == "on", rep.CommitExact, "commit-exact exactly when PostgreSQL records commit times")
	require.Positive(t, rep.ClaimsPerTask)
	require.Positive(t, rep.WALBytesPerTask)
	require.Contains(t, stderr.String(), "bench-wake: warm-up done", "progress goes to stderr")
}

func TestBenchWakeFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://localhost/none")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--workers", "0"}, 2, "--workers"},
		{[]string{"--tasks", "0"}, 2, "--tasks"},
		{[]string{"--every", "0s"}, 2, "--every"},
		{[]string{"--max", "101"}, 2, "--max"},
		{[]string{"--paths", "local,carrier-pigeon"}, 2, `unknown path "carrier-pigeon"`},
		{[]string{"--notify-interval", "-1ms"}, 2, "--notify-interval"},
		{[]string{"--bench-db", "Robert'); DROP"}, 2, "--bench-db"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"--service", ""}, 2, "build it (go build -o bin/ ./cmd/task-service)"},
	} {
		var stdout, stderr bytes.Buffer
		code := runBenchWake(tc.args, &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
	}
	var stdout bytes.Buffer
	require.Equal(t, 0, runBenchWake([]string{"--help"}, &stdout, &bytes.Buffer{}))
	require.Contains(t, stdout.String(), "local   created through the instance the workers poll", "help on stdout")
	cfg, code := parseBenchWakeFlags([]string{"--paths", "notify,local,notify", "--workers", "30", "--service", "/bin/true"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Equal(t, -1, code)
	require.Equal(t, []string{"notify", "local"}, cfg.paths)
	require.Equal(t, 100, wakeWarmup(cfg), "whole blocks of both paths, at least two tasks per worker")
}
