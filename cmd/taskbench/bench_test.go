package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/storetest"
)

// TestBenchRunsEveryModeAndVerifies runs the whole benchmark small: every
// mode at two worker counts on its own scratch database. The bench checks
// the tables after each run itself (every counted task completed once, one
// claimed and one completed event each), so exit 0 means those held.
func TestBenchRunsEveryModeAndVerifies(t *testing.T) {
	base, dbName := scratchBenchDB(t, "taskservice_bench_test_")

	var stdout, stderr bytes.Buffer
	code := runBench([]string{"--database-url", base, "--bench-db", dbName, "--workers", "1,3", "--tasks", "40",
		"--batch-sizes", "2,5", "--create-batch", "7", "--json"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var rep benchReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	require.Len(t, rep.Runs, 14)
	i := 0
	for _, w := range []int{1, 3} {
		var bare float64
		for _, m := range allModes {
			batches := []int{0}
			switch m {
			case modeHTTPBatch:
				batches = []int{2, 5}
			case modeHTTPCreate:
				batches = []int{7}
			}
			for _, batch := range batches {
				r := rep.Runs[i]
				i++
				require.Equal(t, m, r.Mode)
				require.Equal(t, w, r.Workers)
				require.Equal(t, batch, r.Batch)
				switch {
				case m == modeStoreCreate:
					// A claim that loses every SKIP LOCKED race thrice moves on.
					require.InDelta(t, 40, r.Tasks, 3, "%s at %d workers", m, w)
				case m == modeHTTPCreate:
					require.Equal(t, max(40, w*7*3), r.Tasks, "%s at %d workers", m, w)
				case batch > 0:
					require.Equal(t, max(40, w*batch*5), r.Tasks, "%s/%d at %d workers", m, batch, w)
				default:
					require.Equal(t, 40, r.Tasks, "%s at %d workers", m, w)
				}
				require.Positive(t, r.TasksPerSec)
				require.Positive(t, r.ClaimP50Ms)
				require.GreaterOrEqual(t, r.ClaimP99Ms, r.ClaimP50Ms)
				require.Nil(t, r.TasksPerSecVsRiver, "no --river")
				switch m {
				case modeBare:
					require.Nil(t, r.TasksPerSecVsBare)
					bare = r.TasksPerSec
				case modeHTTPCreate:
					require.Nil(t, r.TasksPerSecVsBare, "creation is no drain: no ratio to bare's")
				default:
					require.NotNil(t, r.TasksPerSecVsBare)
					require.InDelta(t, r.TasksPerSec/bare, *r.TasksPerSecVsBare, 1e-9)
				}
			}
		}
	}
	require.Contains(t, stderr.String(), "[http 3w]", "progress lines go to stderr")
	require.Contains(t, stderr.String(), "[http-batch/5 3w]")
	require.Contains(t, stderr.String(), "[http-create/7 3w]")
}

func TestBenchFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://localhost/none")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Example:"},
		{[]string{"--workers", "1,x"}, 2, "--workers"},
		{[]string{"--workers", "0"}, 2, "--workers"},
		{[]string{"--modes", "bare,fast"}, 2, `unknown mode "fast"`},
		{[]string{"--tasks", "0"}, 2, "--tasks"},
		{[]string{"--batch-sizes", "10,101"}, 2, "--batch-sizes"},
		{[]string{"--bench-db", "Robert'); DROP"}, 2, "--bench-db"},
		{[]string{"extra"}, 2, "unexpected arguments"},
	} {
		var stdout, stderr bytes.Buffer
		code := runBench(tc.args, &stdout, &stderr)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, stderr.String(), tc.want, "%v", tc.args)
	}

	cfg, code := parseBenchFlags([]string{"--modes", "http,bare"}, &bytes.Buffer{})
	require.Equal(t, -1, code)
	require.Equal(t, []string{"bare", "http"}, cfg.modes, "bare runs first whatever the order given")
	require.Equal(t, 1250, cfg.tasksFor(1))
	require.Equal(t, 5000, cfg.tasksFor(4))
	require.Equal(t, 20000, cfg.tasksFor(64))
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:5/app?sslmode=disable":    "postgres://u@h:5/taskservice_bench?sslmode=disable",
		"postgres://u@h/app?dbname=app":           "postgres://u@h/taskservice_bench?dbname=taskservice_bench",
		"host=h dbname=app":                       "host=h dbname=app dbname=taskservice_bench",
		"postgresql://u:p%40ss@h/app?x=1&y=2#top": "postgresql://u:p%40ss@h/taskservice_bench?x=1&y=2#top",
	} {
		got, err := withDatabase(in, "taskservice_bench")
		require.NoError(t, err)
		require.Equal(t, want, got, in)
		require.False(t, strings.Contains(got, "/app"), got)
	}
}

// scratchBenchDB names a database for a bench test on the test server (the
// bench creates it) and drops it when the test ends.
func scratchBenchDB(t *testing.T, prefix string) (serverURL, name string) {
	t.Helper()
	serverURL = storetest.DatabaseURL(t)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name = prefix + hex.EncodeToString(suffix[:])
	t.Cleanup(func() { dropDatabase(t, serverURL, name) })
	return serverURL, name
}

// TestBenchCreateLaneAgainstRiver runs http-create with River's InsertMany
// as its peer (riverbench, built here from scripts/riverbench): River runs
// before and after the lane, with as many inserters as the lane has
// clients and the same number of jobs, and the lane's ratio is to the mean
// of River's two rates.
func TestBenchCreateLaneAgainstRiver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds River")
	}
	riverBin := filepath.Join(t.TempDir(), "riverbench")
	build := exec.Command("go", "build", "-o", riverBin, ".")
	build.Dir = filepath.Join("..", "..", "scripts", "riverbench")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	base, dbName := scratchBenchDB(t, "taskservice_bench_test_")
	t.Cleanup(func() { dropDatabase(t, base, dbName+"_river") })
	var stdout, stderr bytes.Buffer
	code := runBench([]string{"--database-url", base, "--bench-db", dbName, "--workers", "2", "--tasks", "40",
		"--modes", "http-create", "--create-batch", "9", "--river", riverBin, "--json"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var rep benchReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	require.Len(t, rep.Runs, 3)
	first, lane, last := rep.Runs[0], rep.Runs[1], rep.Runs[2]
	for _, r := range []benchResult{first, last} {
		require.Equal(t, modeRiverInsert, r.Mode)
		require.Equal(t, 2, r.Workers)
		require.Equal(t, 54, r.Tasks, "River inserts as many as the lane creates: 2 x 9 x 3")
		require.Positive(t, r.TasksPerSec)
	}
	require.Equal(t, modeHTTPCreate, lane.Mode)
	require.Equal(t, 54, lane.Tasks)
	require.NotNil(t, lane.TasksPerSecVsRiver)
	require.InDelta(t, lane.TasksPerSec/((first.TasksPerSec+last.TasksPerSec)/2), *lane.TasksPerSecVsRiver, 1e-9)
	require.Contains(t, stderr.String(), "[river-insert 2w]")

	var table bytes.Buffer
	printBenchTable(&table, &rep)
	require.Regexp(t, `http-create/9\s+2\s+54\s+\d+\s+\d+\.\d\d`, table.String(), "the table gives the lane's ratio to River")
}

// dropDatabase drops a database the bench made beside its own.
func dropDatabase(t *testing.T, serverURL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Errorf("drop %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("drop %s: %v", name, err)
	}
}
