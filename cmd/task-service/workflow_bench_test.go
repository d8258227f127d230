package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// unblockWarmup is the untimed rounds before the timed ones: a fresh
// instance's pool connections plan each statement on first use (tens of
// milliseconds on a loaded machine), which no running service pays per task.
const unblockWarmup = 20

// BenchmarkUnblockLatency times a dependency's completion to its
// dependent's arrival at a long-polling worker, through the real binary:
// one worker completes X while another waits in a long poll; D depends on
// X. Each of b.N timed rounds (after unblockWarmup untimed ones) gives three
// intervals, all ending when the waiting worker has the claim's answer:
//   - from-commit: from X's completed_at, which is the task.completed
//     event's recorded time, taken by the server before the completing
//     statement is sent, so before its commit: an upper bound of the time
//     from the commit (server and bench share the machine's clock);
//   - from-answer: from the moment the completion's answer is back, after
//     the commit: a lower bound of the time from the commit;
//   - from-request: from the moment the completion request is sent, so it
//     holds that request's own way in and the statement's round trip too;
//   - exactly from the commit (commit-exact), when the server has
//     track_commit_timestamp on: from the commit time PostgreSQL recorded
//     for the transaction that completed X (pg_xact_commit_timestamp of its
//     row's xmin), read after the round.
//
// Reported: p50 and p99 of each.
//
//	go test ./cmd/task-service -run '^$' -bench BenchmarkUnblockLatency -benchtime 200x
func BenchmarkUnblockLatency(b *testing.B) {
	ctx := context.Background()
	dbURL := storetest.NewDB(b)
	s := startServer(b, dbURL)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(b, err)
	defer conn.Close(ctx)
	var tracked string
	require.NoError(b, conn.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&tracked))
	exact := tracked == "on"
	if !exact {
		b.Log("track_commit_timestamp is off: no commit-exact figures (ALTER SYSTEM SET track_commit_timestamp = on, then restart PostgreSQL)")
	}
	admin := client.New(s.base, nil)
	_, err = admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(b, err)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "step", Label: "Step", ParamSchema: json.RawMessage(`{"type":"object"}`)})
	require.NoError(b, err)
	login := func(name string) *client.Client {
		_, err := admin.CreateWorker(ctx, client.NewWorker{Email: name + "@workers.example.com", Password: "worker-password", FullName: name, MaxConcurrentTasks: 1})
		require.NoError(b, err)
		c := client.New(s.base, nil)
		_, err = c.Login(ctx, name+"@workers.example.com", "worker-password")
		require.NoError(b, err)
		return c
	}
	upstream, downstream := login("upstream"), login("downstream")
	// round unblocks one dependent; it returns the intervals (fromExact 0
	// without commit timestamps).
	round := func(i int) (fromCommit, fromAnswer, fromRequest, fromExact time.Duration) {
		x, err := admin.CreateTask(ctx, client.NewTask{Title: fmt.Sprintf("x%d", i), TaskTypeID: tt.ID})
		require.NoError(b, err)
		got, err := upstream.Claim(ctx)
		require.NoError(b, err)
		require.Equal(b, x.ID, got.ID)
		d, err := admin.CreateTask(ctx, client.NewTask{Title: fmt.Sprintf("d%d", i), TaskTypeID: tt.ID, DependsOn: []string{x.ID}})
		require.NoError(b, err)
		arrived := make(chan time.Time, 1)
		go func() {
			defer close(arrived)
			tasks, err := downstream.ClaimMany(ctx, 1, 10*time.Second)
			at := time.Now()
			if err == nil && len(tasks) == 1 && tasks[0].ID == d.ID {
				arrived <- at
			}
		}()
		time.Sleep(30 * time.Millisecond) // the long poll is waiting
		sent := time.Now()
		done, err := upstream.Complete(ctx, x.ID)
		answered := time.Now()
		require.NoError(b, err)
		require.NotNil(b, done.CompletedAt)
		at, ok := <-arrived
		require.True(b, ok, "the dependent did not reach the long-polling worker")
		if exact {
			var committed time.Time
			require.NoError(b, conn.QueryRow(ctx, `SELECT pg_xact_commit_timestamp(xmin) FROM worker_tasks WHERE id = $1`, x.ID).Scan(&committed))
			fromExact = at.Sub(committed)
		}
		_, err = downstream.Complete(ctx, d.ID)
		require.NoError(b, err)
		return at.Sub(*done.CompletedAt), at.Sub(answered), at.Sub(sent), fromExact
	}
	for i := range unblockWarmup {
		round(-1 - i)
	}
	var fromCommit, fromAnswer, fromRequest, fromExact []time.Duration
	b.ResetTimer()
	for i := range b.N {
		c, a, r, e := round(i)
		fromCommit, fromAnswer, fromRequest, fromExact = append(fromCommit, c), append(fromAnswer, a), append(fromRequest, r), append(fromExact, e)
	}
	b.StopTimer()
	ms := func(took []time.Duration, p float64) float64 {
		slices.Sort(took)
		return float64(took[int(p*float64(len(took)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(fromCommit, 0.5), "p50-from-commit-ms")
	b.ReportMetric(ms(fromCommit, 0.99), "p99-from-commit-ms")
	b.ReportMetric(ms(fromAnswer, 0.5), "p50-from-answer-ms")
	b.ReportMetric(ms(fromAnswer, 0.99), "p99-from-answer-ms")
	b.ReportMetric(ms(fromRequest, 0.5), "p50-from-request-ms")
	b.ReportMetric(ms(fromRequest, 0.99), "p99-from-request-ms")
	if exact {
		b.ReportMetric(ms(fromExact, 0.5), "p50-commit-exact-ms")
		b.ReportMetric(ms(fromExact, 0.99), "p99-commit-exact-ms")
	}
	b.ReportMetric(0, "ns/op")
}
