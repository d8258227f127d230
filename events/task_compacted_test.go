package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/clawdbot/task-service/events"
)

// A compaction of a task that failed once on a release, then completed:
// its fold is the task's final state less params and result, its
// attempts say who held it and how it ended, and its summary says what
// was kept and what was dropped.
func TestCompactTask(t *testing.T) {
	const id, w1, w2 = "0190c6e2-9bd4-7c8a-b6a1-0000000000d1", "0190c6e2-9bd4-7c8a-b6a1-0000000000a1", "0190c6e2-9bd4-7c8a-b6a1-0000000000a2"
	at := time.Date(2026, 8, 1, 10, 0, 0, 0, time.UTC)
	ps := []events.Payload{
		events.TaskCreated{Title: "crawl", Params: json.RawMessage(`{"url":"https://example.com"}`), Priority: events.PriorityHigh},
		events.TaskClaimed{WorkerID: w1},
		events.TaskReleased{WorkerID: w1, Reason: "shutting down"},
		events.TaskClaimed{WorkerID: w2},
		events.TaskUpdatePosted{UpdateID: "u1", AuthorID: w2, Message: "half way"},
		events.TaskUsageReported{Model: "m", InputTokens: 10, OutputTokens: 5},
		events.TaskResultPosted{WorkerID: w2, Result: json.RawMessage(`{"pages":3}`)},
		events.TaskCompleted{WorkerID: w2},
	}
	var stream []events.Envelope
	for i, p := range ps {
		e := events.New(events.StreamTask, id, p, events.Meta{}, at.Add(time.Duration(i)*time.Minute))
		e.Version, e.Seq = i+1, int64(100+i)
		e.Data, _ = json.Marshal(p)
		stream = append(stream, e)
	}
	full := events.FoldTask(stream)
	c, err := events.CompactTask(stream, []string{"events/day/2026-08-01.jsonl.gz"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Events != len(ps) || c.FirstSeq != 100 || c.LastSeq != int64(100+len(ps)-1) {
		t.Fatalf("events %d, seqs %d-%d", c.Events, c.FirstSeq, c.LastSeq)
	}
	if len(c.Attempts) != 2 || c.Attempts[0].Outcome != "released" || c.Attempts[1].Outcome != "completed" ||
		c.Attempts[1].DurationMS != int64(4*time.Minute/time.Millisecond) {
		t.Fatalf("attempts %+v", c.Attempts)
	}
	if c.Result == nil || c.Result.Size != len(`{"pages":3}`) || c.Params == nil || c.Updates != 1 {
		t.Fatalf("digests %+v %+v, updates %d", c.Result, c.Params, c.Updates)
	}
	var types []string
	for _, x := range c.Usage {
		types = append(types, x.Type)
	}
	if strings.Join(types, ",") != "task.usage_reported" {
		t.Fatalf("counted %v", types)
	}
	// Fold the compaction alone, at the next version.
	e := events.New(events.StreamTask, id, c, events.Meta{}, at.Add(90*24*time.Hour))
	e.Version = len(ps) + 1
	e.Data, _ = json.Marshal(c)
	e.Payload = nil
	if err := e.Decode(); err != nil {
		t.Fatal(err)
	}
	got := events.FoldTask([]events.Envelope{e})
	want := *full
	want.Params, want.Result, want.Version = json.RawMessage(`{}`), nil, len(ps)+1
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Fatalf("fold of the compaction:\n got %s\nwant %s", gj, wj)
	}
	s := events.Summary(e, func(string) string { return "" })
	for _, part := range []string{"compacted 8 events", "events/day/2026-08-01.jsonl.gz", "final state completed", "2 attempts",
		"released in 1m0s", "result size 11 bytes", "usage 1 reports, 15 tokens", "dropped params (", "1 thread messages"} {
		if !strings.Contains(s, part) {
			t.Errorf("summary %q lacks %q", s, part)
		}
	}
}
