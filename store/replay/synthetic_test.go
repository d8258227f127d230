package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/replay/replaytest"
	"github.com/clawdbot/task-service/store/storetest"
)

// A synthetic log rebuilds into projections that verify clean, and a second
// rebuild over live tables gives the same rows.
func TestSyntheticLogRebuildsAndVerifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	n, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: 20_000, Seed: 1, Active: 300})
	require.NoError(t, err)

	rep, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.EqualValues(t, n, rep.Events)
	require.Positive(t, rep.Rows["worker_tasks"])
	require.Positive(t, rep.Rows["worker_task_updates"])
	require.Positive(t, rep.Rows["task_assignments"])

	v, err := replay.Verify(ctx, pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, v.Clean(), "differences: %+v", v.Differences)
	require.EqualValues(t, n, v.Events)
	for name, td := range v.Tables {
		require.Equal(t, rep.Rows[name], td.Rows, name)
	}
	var tasks int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks`).Scan(&tasks))
	require.Equal(t, rep.Rows["worker_tasks"], tasks)

	again, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.Equal(t, rep.Rows, again.Rows)
}

// The heap order of the log does not matter: with every row stored in
// reverse, each stream arrives newest first and is put back in order.
func TestReplayFoldsALogStoredOutOfOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	_, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: 5_000, Seed: 7, Active: 50})
	require.NoError(t, err)
	first, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `CREATE TABLE reversed AS SELECT * FROM task_events ORDER BY seq DESC;
		TRUNCATE task_events;
		INSERT INTO task_events OVERRIDING SYSTEM VALUE SELECT * FROM reversed;
		DROP TABLE reversed`)
	require.NoError(t, err)
	var firstSeq, last int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT seq FROM task_events LIMIT 1`).Scan(&firstSeq))
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(seq) FROM task_events`).Scan(&last))
	require.Equal(t, last, firstSeq, "the heap now starts with the newest event")

	v, err := replay.Verify(ctx, pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, v.Clean(), "differences: %+v", v.Differences)
	again, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	require.Equal(t, first.Rows, again.Rows)
}

// TestReplayThroughput measures Verify and Rebuild on a large synthetic
// log. It runs only when REPLAY_BENCH_EVENTS is set (e.g. 1000000):
//
//	REPLAY_BENCH_EVENTS=1000000 go test ./store/replay -run TestReplayThroughput -v -timeout 30m
//
// REPLAY_BENCH_URL names a migrated database to keep between runs (seeded
// when empty). Besides wall time it reports the CPU time of this process
// and of the PostgreSQL backends that served the run: on a machine shared
// with other work, events per CPU second say what the code costs.
func TestReplayThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REPLAY_BENCH_EVENTS"))
	if n <= 0 {
		t.Skip("set REPLAY_BENCH_EVENTS to run")
	}
	// As taskctl replay does: the fold is a large, long-lived heap.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	ctx := context.Background()
	url := os.Getenv("REPLAY_BENCH_URL")
	if url == "" {
		url = storetest.NewDB(t)
	}
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = benchApp // replay's own connections inherit it
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var have int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events`).Scan(&have))
	if have == 0 {
		start := time.Now()
		written, err := replaytest.Seed(ctx, pool, replaytest.Config{Events: n, Seed: 42})
		require.NoError(t, err)
		t.Logf("seeded %d events in %s", written, time.Since(start).Round(time.Millisecond))
		_, err = pool.Exec(ctx, `VACUUM ANALYZE task_events`)
		require.NoError(t, err)
	}
	var load string
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	t.Logf("load average before: %s", load)

	report := func(what string, events int64, elapsed time.Duration, m *cpuMeter, extra string) {
		client, server := m.stop()
		t.Logf("%-8s %d events in %6.2fs = %7.0f events/s wall | CPU: client %5.2fs, PostgreSQL %5.2fs = %7.0f events per CPU second%s",
			what, events, elapsed.Seconds(), float64(events)/elapsed.Seconds(), client.Seconds(), server.Seconds(),
			float64(events)/(client+server).Seconds(), extra)
	}
	m := startCPU(ctx, t, pool)
	first, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{})
	require.NoError(t, err)
	report("rebuild", first.Events, first.Elapsed, m, fmt.Sprintf(" (onto empty tables; rows %v)", first.Rows))

	for range 2 {
		phases := map[string]time.Duration{}
		m := startCPU(ctx, t, pool)
		v, err := replay.Verify(ctx, pool, replay.VerifyConfig{Progress: func(p replay.Progress) { phases[p.Phase] = p.Elapsed }})
		require.NoError(t, err)
		require.True(t, v.Clean(), "differences: %+v", v.Differences)
		report("verify", v.Events, v.Elapsed, m, fmt.Sprintf(" (phases %v)", phases))

		phases = map[string]time.Duration{}
		m = startCPU(ctx, t, pool)
		r, err := replay.Rebuild(ctx, pool, replay.RebuildConfig{Progress: func(p replay.Progress) { phases[p.Phase] = p.Elapsed }})
		require.NoError(t, err)
		report("rebuild", r.Events, r.Elapsed, m, fmt.Sprintf(" (lock held %s; phases %v)", r.LockHeld.Round(time.Millisecond), phases))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	t.Logf("load average after: %s", load)
}

const benchApp = "replay_throughput"

// cpuMeter adds up the CPU time of this process and of the PostgreSQL
// backends whose application_name is benchApp (the run's connections),
// sampled from /proc every 50 ms while they live.
type cpuMeter struct {
	startSelf time.Duration
	stopOnce  sync.Once
	done      chan struct{}
	mu        sync.Mutex
	base      map[int]time.Duration // backends alive at the start, and their CPU then
	backends  map[int]time.Duration
	client    time.Duration
	server    time.Duration
}

// stop ends sampling and returns the CPU time spent since the start. The
// last sample of a backend that exited may be up to 50 ms old.
func (m *cpuMeter) stop() (client, server time.Duration) {
	m.stopOnce.Do(func() {
		close(m.done)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.client = selfCPU() - m.startSelf
		for pid, cpu := range m.backends {
			m.server += cpu - m.base[pid]
		}
	})
	return m.client, m.server
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads utime+stime of pid (clock ticks of 10 ms on Linux).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond, true
}

func startCPU(ctx context.Context, t *testing.T, pool *pgxpool.Pool) *cpuMeter {
	m := &cpuMeter{startSelf: selfCPU(), done: make(chan struct{}), backends: map[int]time.Duration{}}
	sample := func() {
		rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, benchApp)
		if err != nil {
			return
		}
		pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, pid := range pids {
			if cpu, ok := procCPU(int(pid)); ok && cpu > m.backends[int(pid)] {
				m.backends[int(pid)] = cpu
			}
		}
	}
	// Connections alive now (the pool's) count only for what they spend
	// from now on; replay's own connections are new.
	sample()
	base := map[int]time.Duration{}
	for pid, cpu := range m.backends {
		base[pid] = cpu
	}
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	m.base = base
	t.Cleanup(func() { m.stop() })
	return m
}
