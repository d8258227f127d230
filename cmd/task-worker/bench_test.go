package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// TestLoopOverhead measures what the loop itself costs per task with a
// no-op command (true): claim answer → command started, command exited →
// completion acknowledged, and the claim request. It reads the worker's own
// "task finished" log lines. Not a pass/fail test: it runs only with
// TASK_WORKER_BENCH=1 (TASK_WORKER_BENCH_TASKS tasks, default 500) and
// logs the figures.
//
//	TASK_WORKER_BENCH=1 go test ./cmd/task-worker -run TestLoopOverhead -v
func TestLoopOverhead(t *testing.T) {
	if os.Getenv("TASK_WORKER_BENCH") == "" {
		t.Skip("set TASK_WORKER_BENCH=1 to measure the loop's overhead per task")
	}
	n := 500
	if v, err := strconv.Atoi(os.Getenv("TASK_WORKER_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	f := newFixture(t)
	email, _ := f.newWorkerAccount("bench", 1)
	typeID := f.newType("noop", 0, "")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.newTask(typeID, fmt.Sprintf("noop %d", i), nil)
	}
	start := time.Now()
	w := f.startWorker(email, nil, "--command", "true", "--log-level", "info")
	f.waitStatus(ids[n-1], events.StatusCompleted, time.Duration(n)*time.Second)
	elapsed := time.Since(start)

	var claim, startOv, reportOv []float64
	for _, l := range w.logLines() {
		if l["message"] != "task finished" {
			continue
		}
		claim = append(claim, l["claim_ms"].(float64))
		startOv = append(startOv, l["start_overhead_ms"].(float64))
		reportOv = append(reportOv, l["report_overhead_ms"].(float64))
	}
	require.Len(t, startOv, n)
	t.Logf("%d tasks, 1 slot, command `true`, %.0f tasks/s end to end (including worker start-up)", n, float64(n)/elapsed.Seconds())
	for _, m := range []struct {
		name string
		v    []float64
	}{{"claim request", claim}, {"claim answer -> command started", startOv},
		{"command exited -> completed", reportOv}} {
		t.Logf("%-32s p50 %6.2f ms   p99 %6.2f ms   max %6.2f ms", m.name, pct(m.v, 50), pct(m.v, 99), pct(m.v, 100))
	}
}

func pct(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}
