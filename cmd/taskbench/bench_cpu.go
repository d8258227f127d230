package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CPU time per task is the figure that noise on a shared machine disturbs
// least: throughput falls when someone else compiles, the CPU a task costs
// does not. bench reports it for this process (workers, clients and the
// in-process server) and for the PostgreSQL backends of the bench database
// when they run on this machine (readable in /proc).

// cpuSample is CPU used so far: this process, and each backend by pid.
type cpuSample struct {
	self     time.Duration
	backends map[int]time.Duration // nil when the backends are not visible
}

// clockTick is the unit of /proc/PID/stat times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

func sampleCPU(ctx context.Context, pools ...*pgxpool.Pool) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if len(pools) == 0 || pools[0] == nil {
		return s
	}
	s.backends = sampleBackends(ctx, pools[0], procCPU)
	return s
}

// sampleBackends reads one figure of each backend of the pool's database
// from /proc; nil when any is not visible (a remote server: no figure
// rather than a wrong one).
func sampleBackends(ctx context.Context, pool *pgxpool.Pool, read func(pid int) (time.Duration, bool)) map[int]time.Duration {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := map[int]time.Duration{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return nil
		}
		d, ok := read(pid)
		if !ok {
			return nil
		}
		out[pid] = d
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// procCPU reads utime + stime of a process from /proc.
func procCPU(pid int) (time.Duration, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(raw[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * clockTick, true
}

// cpuPerTask fills the run's CPU figures from samples before and after.
func cpuPerTask(r *benchResult, before, after cpuSample) {
	if r.Tasks == 0 {
		return
	}
	perTask := func(d time.Duration) *float64 {
		v := float64(d.Microseconds()) / float64(r.Tasks)
		return &v
	}
	r.BenchCPUUsPerTask = perTask(after.self - before.self)
	if before.backends == nil || after.backends == nil {
		return
	}
	var used time.Duration
	for pid, d := range after.backends {
		used += d - before.backends[pid] // a backend born during the run started at 0
	}
	r.PGCPUUsPerTask = perTask(used)
}
