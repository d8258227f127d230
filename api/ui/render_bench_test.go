package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// BenchmarkRenderViews times rendering two of the busiest views, layout
// included, from data made here (no database): the events page's 100
// lines and one page of 50 workers.
//
//	go test ./api/ui -run '^$' -bench RenderViews -benchmem
func BenchmarkRenderViews(b *testing.B) {
	as, err := newAssets()
	if err != nil {
		b.Fatal(err)
	}
	vs, err := parseViews(as)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	views := make([]api.EventView, backlog)
	for i := range views {
		data, err := json.Marshal(map[string]any{"worker_id": "01a21d86-2537-7191-adeb-5b1181906f6a",
			"attempts": []any{map[string]any{"worker": "w", "reason": "a failure reason of some length", "n": i}}, "result_size": 1234})
		if err != nil {
			b.Fatal(err)
		}
		views[i] = api.EventView{Seq: int64(i), Position: fmt.Sprintf("%d.%d", i, i), StreamType: "task",
			StreamID: "01a21d87-0d54-7618-b1ca-993a05cdf2df", Version: 3, Type: "task.compacted", Data: data,
			OccurredAt: now.Format(time.RFC3339Nano), Actor: api.ActorView{Kind: events.ActorSystem, ID: "compaction"},
			Summary: "compacted: 3 attempts kept"}
	}
	workers := make([]workerRow, 50)
	for i := range workers {
		seen := now.Add(-time.Duration(i) * time.Second)
		workers[i] = newWorkerRow(store.WorkerView{User: events.User{ID: fmt.Sprintf("01a21d86-2537-7191-adeb-5b11819%05d", i),
			Email: fmt.Sprintf("worker%d@example.com", i), FullName: fmt.Sprintf("Worker %d", i), IsWorker: true,
			MaxConcurrentTasks: 4, Online: i%2 == 0, CreatedAt: now, Active: true}, LastActivityAt: &seen,
			InProgressCount: 1, PendingCount: i, CompletedToday: 10 * i, AvailableSlots: 3}, nil)
	}
	for _, v := range []struct {
		name string
		data any
	}{
		{"events", eventsData{Rows: eventRows(views), Types: events.Types(), Worker: &workerPicker{}}},
		{"workers", workersData{Workers: workers, Total: 50, Online: 25, Self: "/workers"}},
	} {
		t := vs.pages[v.name]
		p := page{View: v.name, Path: "/" + v.name, Nav: menu(), Data: v.data, User: "admin@example.com", CSRF: "token"}
		var buf bytes.Buffer
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				buf.Reset()
				if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/page")
		})
	}
}
