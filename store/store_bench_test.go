package store_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// The store's hot paths under b.RunParallel: GOMAXPROCS x benchParallelism
// goroutines, each acting as its own worker user (max_concurrent_tasks 1),
// as the API's concurrent requests would. `taskbench lanes` is the end-to-end
// counterpart (bare SQL, store and HTTP side by side); these isolate one
// path each and run under `make bench-go`.

const benchParallelism = 8

// benchStore is a fresh database with one task type and n worker users.
type benchStore struct {
	pool    *pgxpool.Pool
	db      *store.DB
	typeID  string
	workers []string
}

func newBenchStore(b *testing.B, n int) *benchStore {
	b.Helper()
	ctx := context.Background()
	pool := storetest.NewPool(b)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		b.Fatal(err)
	}
	meta := events.Meta{Actor: events.System("bench")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: "bench", Label: "Bench", ParamSchema: []byte(`{"type":"object"}`)}, meta)
	if err != nil {
		b.Fatal(err)
	}
	s := &benchStore{pool: pool, db: db, typeID: tt.ID}
	for i := range n {
		u, err := db.CreateUser(ctx, events.UserRegistered{Email: fmt.Sprintf("w%d@bench.invalid", i), FullName: "Bench worker",
			IsWorker: true, MaxConcurrentTasks: 1}, "bench-password", "not-a-real-hash", meta)
		if err != nil {
			b.Fatal(err)
		}
		s.workers = append(s.workers, u.ID)
	}
	return s
}

func (s *benchStore) newTask(i int) store.NewTaskParams {
	return store.NewTaskParams{TaskTypeID: s.typeID, NewTaskParams: events.NewTaskParams{
		Title: fmt.Sprintf("bench task %d", i), Params: []byte(`{}`), Priority: events.PriorityMedium}}
}

// prefill creates n pending tasks, a few hundred per transaction.
func (s *benchStore) prefill(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	meta := events.Meta{Actor: events.System("bench")}
	for i := 0; i < n; i += 500 {
		err := s.db.WithTx(ctx, func(tx pgx.Tx) error {
			for j := i; j < min(n, i+500); j++ {
				if _, err := s.db.CreateTask(ctx, tx, s.newTask(j), meta); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE worker_tasks`); err != nil {
		b.Fatal(err)
	}
}

// nextWorker hands each RunParallel goroutine a worker of its own.
func (s *benchStore) nextWorker(b *testing.B, next *atomic.Int64) string {
	i := int(next.Add(1)) - 1
	if i >= len(s.workers) {
		b.Errorf("more goroutines than bench workers (%d)", len(s.workers))
		return s.workers[0]
	}
	return s.workers[i]
}

func benchGoroutines() int { return runtime.GOMAXPROCS(0) * benchParallelism }

func reportTasksPerSec(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "tasks/s")
	}
}

// BenchmarkClaimComplete is a worker's lifecycle through the store on a
// pre-filled queue: Claim, then CompleteTask, as the API runs them (each
// batched with the other goroutines' calls, ADR 008). One op is one task.
func BenchmarkClaimComplete(b *testing.B) {
	s := newBenchStore(b, benchGoroutines())
	s.prefill(b, b.N)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		worker := s.nextWorker(b, &next)
		meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}}
		for pb.Next() {
			// There are as many tasks as iterations, so a claim finds one; a
			// nil can only be SKIP LOCKED passing over rows others are
			// claiming at that instant: claim again.
			var t *store.TaskWithType
			for attempt := 0; t == nil; attempt++ {
				var err error
				if t, err = s.db.Claim(ctx, worker, meta); err != nil {
					b.Error(err)
					return
				}
				if t == nil && attempt == 100 {
					b.Error("claim keeps finding nothing on a non-empty queue")
					return
				}
			}
			if _, _, err := s.db.CompleteTask(ctx, t.ID, worker, meta); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportTasksPerSec(b)
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE status <> 'completed'`).Scan(&left); err != nil || left != 0 {
		b.Errorf("after the run: %d tasks not completed (err %v)", left, err)
	}
}

// BenchmarkBareClaimComplete is the same loop in plain SQL with no events:
// the machine's limit, for the ratio of BenchmarkClaimComplete to it.
func BenchmarkBareClaimComplete(b *testing.B) {
	s := newBenchStore(b, benchGoroutines())
	s.prefill(b, b.N)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		worker := s.nextWorker(b, &next)
		for pb.Next() {
			var id string
			err := s.pool.QueryRow(ctx, `UPDATE worker_tasks SET status = 'in_progress', assigned_to = $1, started_at = now()
				WHERE id = (SELECT id FROM worker_tasks WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated
				            ORDER BY priority_rank, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
				RETURNING id`, worker).Scan(&id)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := s.pool.Exec(ctx, `UPDATE worker_tasks SET status = 'completed', completed_at = now() WHERE id = $1`, id); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportTasksPerSec(b)
}

// BenchmarkCreateTask is task creation through the store, each its own
// transaction (task.created plus the projection row), as POST
// /admin/workers/tasks runs it. One op is one task.
func BenchmarkCreateTask(b *testing.B) {
	s := newBenchStore(b, 0)
	ctx := context.Background()
	meta := events.Meta{Actor: events.System("bench")}
	var seq atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.db.CreateTask(ctx, s.pool, s.newTask(int(seq.Add(1))), meta); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportTasksPerSec(b)
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE type = 'task.created'`).Scan(&n); err != nil || n != b.N {
		b.Errorf("%d task.created events for %d creates (err %v)", n, b.N, err)
	}
}

// BenchmarkCreateTasks is the batch route's store call under load:
// GOMAXPROCS x benchParallelism goroutines each calling CreateTasks with
// 1,000 tasks at a time. One op is one task; pg-µs/task is the CPU of the
// database's backends per task, read from /proc when the server runs on
// this machine (ADR 018).
func BenchmarkCreateTasks(b *testing.B) {
	s := newBenchStore(b, 0)
	ctx := context.Background()
	meta := events.Meta{Actor: events.System("bench")}
	const batch = 1000
	var seq atomic.Int64
	create := func(ps []store.NewTaskParams) {
		if _, err := s.db.CreateTasks(ctx, s.pool, ps, meta); err != nil {
			b.Error(err)
		}
	}
	backend0 := backendCPU(b, s.pool)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ps := make([]store.NewTaskParams, 0, batch)
		for pb.Next() {
			if ps = append(ps, s.newTask(int(seq.Add(1)))); len(ps) == batch {
				create(ps)
				ps = ps[:0]
			}
		}
		if len(ps) > 0 {
			create(ps)
		}
	})
	b.StopTimer()
	reportTasksPerSec(b)
	if backend0 >= 0 {
		b.ReportMetric(float64((backendCPU(b, s.pool)-backend0).Microseconds())/float64(b.N), "pg-µs/task")
	}
}

// backendCPU is the CPU time used so far by the client backends of the
// pool's database, or -1 when /proc does not show them.
func backendCPU(b *testing.B, pool *pgxpool.Pool) time.Duration {
	b.Helper()
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return -1
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		utime, _ := strconv.Atoi(f[11])
		stime, _ := strconv.Atoi(f[12])
		sum += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return sum
}
