package reactors_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
)

// TestSchedulerBenchmark measures the scheduler with 10,000 active
// schedules (issue 13): the CPU it costs when nothing is due (this process
// and the PostgreSQL backends), then while the schedules fire once a minute
// each (about 167 firings a second), per firing, and the delay from due
// time to the firing's commit. A measurement, not a test: it runs only with
// SCHEDULE_BENCH=1 (make bench-schedules) and reports, asserting nothing
// about speed.
func TestSchedulerBenchmark(t *testing.T) {
	if os.Getenv("SCHEDULE_BENCH") != "1" {
		t.Skip("set SCHEDULE_BENCH=1 (make bench-schedules) to run the scheduler benchmark")
	}
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("SCHEDULE_BENCH_SCHEDULES")); err == nil && v > 0 {
		n = v
	}
	idle, firing := 30*time.Second, 65*time.Second
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{Name: "tick"})
	// Every schedule fires once a minute; their first slots are spread over
	// a minute that starts in an hour.
	t0 := e.clock.Now().Add(time.Hour).Truncate(time.Minute)
	start := time.Now()
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range jobs {
				at := t0.Add(time.Duration(i%6000) * 10 * time.Millisecond)
				_, err := e.db.CreateSchedule(e.ctx, events.ScheduleSpec{Name: fmt.Sprintf("s%d", i), Overlap: events.OverlapAllow,
					Task:           events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "tick", Params: json.RawMessage(`{}`)},
					ScheduleTiming: events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}, StartAt: &at}},
					nil, events.Meta{Actor: events.System("bench")})
				require.NoError(t, err)
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("created %d schedules in %s", n, time.Since(start).Round(time.Millisecond))
	_, err := e.pool.Exec(e.ctx, `ANALYZE schedules`)
	require.NoError(t, err)

	s, err := reactors.NewScheduler(reactors.SchedulerConfig{DB: e.db, Hub: e.hub, Registerer: e.reg, Logger: e.log})
	require.NoError(t, err)
	e.goRun(s.Run)
	time.Sleep(time.Second) // its first look

	before := e.cpu()
	time.Sleep(idle)
	idleCPU := e.cpu().since(before)

	// Move the clock to five seconds before the first slot and wake the
	// scheduler, as a commit would.
	e.clock.offset.Store(int64(time.Until(t0.Add(-5 * time.Second))))
	phaseStart := e.clock.Now()
	before = e.cpu()
	e.hub.Wake()
	time.Sleep(firing)
	fireCPU := e.cpu().since(before)

	var fired int
	var p50, p99, worst float64
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*),
	        percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM at - due_at)),
	        percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM at - due_at)),
	        max(extract(epoch FROM at - due_at))
	   FROM schedule_firings WHERE at >= $1 AND kind = 'fired'`, phaseStart).Scan(&fired, &p50, &p99, &worst))
	require.Positive(t, fired)
	var missed int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT coalesce(sum(missed), 0) FROM schedule_firings`).Scan(&missed))
	t.Logf("%d active schedules, every minute each", n)
	t.Logf("idle %s: scheduler process %s CPU, PostgreSQL %s CPU (%.2f%% of one core together)",
		idle, idleCPU.self, idleCPU.pg, 100*float64(idleCPU.self+idleCPU.pg)/float64(idle))
	t.Logf("firing %s: %d firings (%.0f/s), %d slots missed; CPU per firing: scheduler process %s, PostgreSQL %s",
		firing, fired, float64(fired)/firing.Seconds(), missed, fireCPU.self/time.Duration(fired), fireCPU.pg/time.Duration(fired))
	t.Logf("firing delay (due -> task.created): p50 %.1f ms, p99 %.1f ms, max %.1f ms", p50*1000, p99*1000, worst*1000)
}

// cpuUse is CPU used so far by this process and by the database's backends.
type cpuUse struct{ self, pg time.Duration }

func (c cpuUse) since(b cpuUse) cpuUse { return cpuUse{self: c.self - b.self, pg: c.pg - b.pg} }

func (e *env) cpu() cpuUse {
	e.t.Helper()
	var ru syscall.Rusage
	require.NoError(e.t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	u := cpuUse{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	rows, err := e.pool.Query(e.ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	require.NoError(e.t, err)
	defer rows.Close()
	for rows.Next() {
		var pid int
		require.NoError(e.t, rows.Scan(&pid))
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // a backend that ended, or a server elsewhere
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		u.pg += time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100
	}
	return u
}
