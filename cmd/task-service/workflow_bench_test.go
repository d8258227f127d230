package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// BenchmarkUnblockLatency times a dependency's completion to its
// dependent's arrival at a long-polling worker, through the real binary:
// one worker completes X while another waits in a long poll; D depends on
// X. Reported: p50 and p99 from the completion request's start to the
// claim's answer.
//
//	go test ./cmd/task-service -run '^$' -bench BenchmarkUnblockLatency -benchtime 200x
func BenchmarkUnblockLatency(b *testing.B) {
	ctx := context.Background()
	s := startServer(b, storetest.NewDB(b))
	admin := client.New(s.base, nil)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
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
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		x, err := admin.CreateTask(ctx, client.NewTask{Title: fmt.Sprintf("x%d", i), TaskTypeID: tt.ID})
		require.NoError(b, err)
		got, err := upstream.Claim(ctx)
		require.NoError(b, err)
		require.Equal(b, x.ID, got.ID)
		d, err := admin.CreateTask(ctx, client.NewTask{Title: fmt.Sprintf("d%d", i), TaskTypeID: tt.ID, DependsOn: []string{x.ID}})
		require.NoError(b, err)
		arrived := make(chan time.Time, 1)
		go func() {
			tasks, err := downstream.ClaimMany(ctx, 1, 10*time.Second)
			at := time.Now()
			if err == nil && len(tasks) == 1 && tasks[0].ID == d.ID {
				arrived <- at
			}
			close(arrived)
		}()
		time.Sleep(30 * time.Millisecond) // the long poll is waiting
		b.StartTimer()
		start := time.Now()
		_, err = upstream.Complete(ctx, x.ID)
		require.NoError(b, err)
		at, ok := <-arrived
		require.True(b, ok, "the dependent did not reach the long-polling worker")
		took = append(took, at.Sub(start))
		b.StopTimer()
		_, err = downstream.Complete(ctx, d.ID)
		require.NoError(b, err)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	q := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
