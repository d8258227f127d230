package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/clawdbot/task-service/events"
)

func TestSummary(t *testing.T) {
	const (
		genesis = "0190c6e2-9bd4-7c8a-b6a1-0000000000a1"
		ada     = "0190c6e2-9bd4-7c8a-b6a1-0000000000a2"
		unknown = "0190c6e2-9bd4-7c8a-b6a1-0000000000ff"
		retryID = "0190c6e2-9bd4-7c8a-b6a1-0000000000b1"
		parent  = "0190c6e2-9bd4-7c8a-b6a1-0000000000c1"
	)
	names := func(id string) string {
		return map[string]string{genesis: "Genesis", ada: "Ada Admin"}[id]
	}
	at := time.Date(2026, 11, 21, 23, 0, 0, 0, time.UTC)
	later := at.Add(30 * time.Second)
	ten, one := 10, 1
	worker := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: genesis}}
	system := events.Meta{Actor: events.System("stuck-detector")}
	long := strings.Repeat("word ", 100)

	cases := []struct {
		name string
		p    events.Payload
		meta events.Meta
		sid  string
		want string
	}{
		{"created", events.TaskCreated{Title: "Crawl NVDA", Priority: events.PriorityHigh}, worker, "", `created "Crawl NVDA" (high)`},
		{"created retry with backoff", events.TaskCreated{Title: "Crawl NVDA (retry 2)", Priority: events.PriorityLow,
			RetryCount: 2, ParentTaskID: parent, AvailableAt: &later}, system, "",
			`created "Crawl NVDA (retry 2)" (low) as retry #2 of 0190c6e2, scheduled for 2026-11-21T23:00:30Z`},
		{"assigned", events.TaskAssigned{WorkerID: genesis, By: ada, Reason: "least loaded"}, worker, "", "assigned to Genesis by Ada Admin: least loaded"},
		{"claimed", events.TaskClaimed{WorkerID: genesis}, worker, "", "claimed by Genesis"},
		{"claimed by someone unknown", events.TaskClaimed{WorkerID: unknown}, worker, "", "claimed by 0190c6e2"},
		{"released without reason", events.TaskReleased{WorkerID: genesis}, worker, "", "released by Genesis"},
		{"update on one line, cut", events.TaskUpdatePosted{AuthorID: genesis, Message: "line one\n\tline two " + long}, worker, "",
			"update from Genesis: line one line two " + strings.TrimSpace(long)[:119-len("line one line two ")] + "…"},
		{"system update", events.TaskUpdatePosted{Message: "Retry #1 created"}, system, "", "update from stuck-detector: Retry #1 created"},
		{"result", events.TaskResultPosted{WorkerID: genesis, Result: json.RawMessage(`{"n":1}`)}, worker, "", "result posted by Genesis (7 bytes)"},
		{"completed", events.TaskCompleted{WorkerID: genesis}, worker, "", "completed by Genesis"},
		{"failed by the worker", events.TaskFailed{WorkerID: genesis, Kind: "error", Reason: "HTTP 429"}, worker, "", "failed (error): HTTP 429"},
		{"failed by the system", events.TaskFailed{WorkerID: genesis, Kind: "worker_offline", Reason: "Worker Genesis went offline"}, system, "",
			"failed (worker_offline): Worker Genesis went offline [held by Genesis]"},
		{"cancelled", events.TaskCancelled{By: ada, Reason: "duplicate"}, worker, "", "cancelled by Ada Admin: duplicate"},
		{"retried", events.TaskRetried{RetryTaskID: retryID, RetryNumber: 1, MaxRetries: 3}, system, "", "retry #1 created: " + retryID},
		{"manual retry with hint", events.TaskRetried{RetryTaskID: retryID, RetryNumber: 4, Manual: true, Hint: "slow down"}, system, "",
			"retry #4 created: " + retryID + " (manual), hint: slow down"},
		{"retry skipped", events.TaskRetrySkipped{Reason: "no such ticker"}, system, "", "retry skipped: no such ticker"},
		{"exhausted", events.TaskRetriesExhausted{Attempts: 4, MaxRetries: 3}, system, "", "retries exhausted after 4 attempts (max retries 3)"},
		{"edited", events.TaskEdited{Title: "New title", Priority: events.PriorityUrgent}, worker, "", `edited: "New title" (urgent)`},
		{"type created", events.TaskTypeCreated{TaskTypeSpec: events.TaskTypeSpec{Name: "crawl", MaxRetries: 3}}, worker, "", `task type "crawl" created (max retries 3)`},
		{"type updated", events.TaskTypeUpdated{TaskTypeSpec: events.TaskTypeSpec{Name: "crawl"}}, worker, "", `task type "crawl" updated`},
		{"type updated with limits", events.TaskTypeUpdated{TaskTypeSpec: events.TaskTypeSpec{Name: "crawl", TypeLimits: events.TypeLimits{
			MaxInProgress: &ten, RateLimit: &events.RateLimit{Count: 50, Per: "1m"}, ConcurrencyKey: "$.ticker", MaxInProgressPerKey: &one}}},
			worker, "", `task type "crawl" updated; limits: at most 10 in progress; 50 claims per 1m; 1 in progress per $.ticker`},
		{"type archived", events.TaskTypeArchived{}, worker, "", "task type archived"},
		{"worker registered", events.UserRegistered{Email: "g@x.io", FullName: "Genesis", IsWorker: true}, worker, "", "worker Genesis <g@x.io> registered"},
		{"admin registered", events.UserRegistered{Email: "a@x.io", FullName: "Ada", IsAdmin: true}, worker, "", "admin Ada <a@x.io> registered"},
		{"went online", events.WorkerWentOnline{}, worker, genesis, "Genesis came online"},
		{"went offline", events.WorkerWentOffline{LastHeartbeat: "2026-11-21T22:50:00Z", ThresholdSeconds: 600, InProgress: 1}, system, genesis,
			"Genesis went offline (silent for more than 600s, last heartbeat 2026-11-21T22:50:00Z, 1 in progress)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sid := c.sid
			if sid == "" {
				sid = parent
			}
			e := events.New(events.StreamTask, sid, c.p, c.meta, at)
			if got := events.Summary(e, names); got != c.want {
				t.Fatalf("Summary:\n got %q\nwant %q", got, c.want)
			}
			if strings.ContainsAny(events.Summary(e, nil), "\n\r") {
				t.Fatal("a summary is one line")
			}
		})
	}

	// Every registered type has a summary of its own, not just its name.
	for _, typ := range events.Types() {
		e := events.Envelope{Type: typ, Data: json.RawMessage(`{}`), OccurredAt: at}
		if err := e.Decode(); err != nil {
			t.Fatalf("decode %s: %v", typ, err)
		}
		if got := events.Summary(e, nil); got == typ {
			t.Errorf("%s has no summary", typ)
		}
	}
	// An unknown payload falls back to the type's name.
	if got := events.Summary(events.Envelope{Type: "schedule.fired"}, names); got != "schedule.fired" {
		t.Errorf("unknown type: %q", got)
	}
}
