package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/clawdbot/task-service/events"
)

const (
	taskID  = "0190c6e2-9bd4-7c8a-b6a1-000000000001"
	typeID  = "0190c6e2-9bd4-7c8a-b6a1-000000000002"
	me      = "0190c6e2-9bd4-7c8a-b6a1-00000000000a" // the worker issuing commands
	other   = "0190c6e2-9bd4-7c8a-b6a1-00000000000b" // another worker
	admin   = "0190c6e2-9bd4-7c8a-b6a1-00000000000c"
	retryID = "0190c6e2-9bd4-7c8a-b6a1-00000000000d"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

// story folds a task stream made of ps, one minute apart, so each test state
// is reached through Apply exactly as the store reaches it.
func story(ps ...events.Payload) (*events.Task, []events.Envelope) {
	all := append([]events.Payload{created()}, ps...)
	evs := make([]events.Envelope, len(all))
	for i, p := range all {
		e := events.New(events.StreamTask, taskID, p, events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: admin}}, t0.Add(time.Duration(i)*time.Minute))
		e.Version = i + 1
		evs[i] = e
	}
	return events.FoldTask(evs), evs
}

func created() events.TaskCreated {
	return events.TaskCreated{Title: "Write the report", Description: "weekly", TaskTypeID: typeID,
		Params: json.RawMessage(`{"days":7}`), Priority: events.PriorityHigh, CreatedBy: admin}
}

// The statuses a command can meet, each reached by a real history.
var states = map[string][]events.Payload{
	"pending":           nil,
	"pending/mine":      {events.TaskAssigned{WorkerID: me, By: admin}},
	"pending/other":     {events.TaskAssigned{WorkerID: other, By: admin}},
	"pending/released":  {events.TaskClaimed{WorkerID: me}, events.TaskReleased{WorkerID: me}},
	"in_progress/mine":  {events.TaskClaimed{WorkerID: me}},
	"in_progress/other": {events.TaskClaimed{WorkerID: other}},
	"completed":         {events.TaskClaimed{WorkerID: me}, events.TaskCompleted{WorkerID: me}},
	"failed":            {events.TaskClaimed{WorkerID: me}, failedEv()},
	"failed/retried":    {events.TaskClaimed{WorkerID: me}, failedEv(), events.TaskRetried{RetryTaskID: retryID, RetryNumber: 1, MaxRetries: 3}},
	"failed/skipped":    {events.TaskClaimed{WorkerID: me}, failedEv(), events.TaskRetrySkipped{Reason: "permanent"}},
	"failed/exhausted":  {events.TaskClaimed{WorkerID: me}, failedEv(), events.TaskRetriesExhausted{Attempts: 1, MaxRetries: 0}},
	"cancelled":         {events.TaskCancelled{By: admin}},
	"cancelled/claimed": {events.TaskClaimed{WorkerID: me}, events.TaskCancelled{By: admin}},
}

func failedEv() events.TaskFailed {
	return events.TaskFailed{WorkerID: me, Kind: events.FailureError, Reason: "boom"}
}

// outcome is what a command must do in a state: exactly these payloads, or
// an error of this kind.
type outcome struct {
	payloads []events.Payload
	err      string // "transition", "forbidden" or "validation:<field>"
}

func ok(ps ...events.Payload) outcome { return outcome{payloads: ps} }

var (
	transition = outcome{err: "transition"}
	forbidden  = outcome{err: "forbidden"}
)

func invalid(field string) outcome { return outcome{err: "validation:" + field} }

func checkOutcome(t *testing.T, want outcome, got []events.Payload, err error) {
	t.Helper()
	switch {
	case want.err == "":
		if err != nil {
			t.Fatalf("want %#v, got error %v", want.payloads, err)
		}
		if !reflect.DeepEqual(got, want.payloads) {
			t.Fatalf("payloads:\n got %#v\nwant %#v", got, want.payloads)
		}
		return
	case got != nil:
		t.Fatalf("want error %s, got payloads %#v (err %v)", want.err, got, err)
	case err == nil:
		t.Fatalf("want error %s, got none", want.err)
	}
	var te *events.TransitionError
	var ve *events.ValidationError
	switch {
	case want.err == "transition":
		if !errors.As(err, &te) || !errors.Is(err, events.ErrInvalidTransition) {
			t.Fatalf("want a TransitionError, got %T %v", err, err)
		}
	case want.err == "forbidden":
		if !errors.Is(err, events.ErrForbidden) || errors.Is(err, events.ErrInvalidTransition) {
			t.Fatalf("want ErrForbidden, got %T %v", err, err)
		}
	case strings.HasPrefix(want.err, "state:"):
		var se *events.StateError
		if !errors.As(err, &se) || !errors.Is(err, events.ErrConflict) || se.Field != strings.TrimPrefix(want.err, "state:") {
			t.Fatalf("want a StateError at %s, got %T %v", strings.TrimPrefix(want.err, "state:"), err, err)
		}
	case strings.HasPrefix(want.err, "validation:"):
		field := strings.TrimPrefix(want.err, "validation:")
		if !errors.As(err, &ve) || !errors.Is(err, events.ErrInvalid) {
			t.Fatalf("want a ValidationError on %s, got %T %v", field, err, err)
		}
		if ve.Field != field {
			t.Fatalf("ValidationError names %q, want %q (%v)", ve.Field, field, err)
		}
	default:
		t.Fatalf("bad expectation %q", want.err)
	}
}

// command is one decide method with its expected outcome in every state.
type command struct {
	name   string
	run    func(*events.Task) ([]events.Payload, error)
	expect map[string]outcome
}

// every fills the same outcome for the named states and transition for the
// rest, so a table row spells out only the exceptions.
func every(allowed outcome, rest outcome, names ...string) map[string]outcome {
	m := map[string]outcome{}
	for s := range states {
		m[s] = rest
	}
	for _, n := range names {
		m[n] = allowed
	}
	return m
}

// holderRule is the outcome of a holder-only command (release, result,
// complete, fail, update): allowed in progress, forbidden on a task the
// worker does not hold, a transition error on its own task in any other
// status.
func holderRule(allowed outcome) map[string]outcome {
	return map[string]outcome{
		"pending":           forbidden,
		"pending/mine":      transition,
		"pending/other":     forbidden,
		"pending/released":  forbidden,
		"in_progress/mine":  allowed,
		"in_progress/other": forbidden,
		"completed":         transition,
		"failed":            transition,
		"failed/retried":    transition,
		"failed/skipped":    transition,
		"failed/exhausted":  transition,
		"cancelled":         forbidden,
		"cancelled/claimed": transition,
	}
}

func TestTaskStateMachine(t *testing.T) {
	t.Parallel()
	title, desc, prio := "New title", "new description", events.PriorityUrgent
	edited := events.TaskEdited{Title: title, Description: desc, Params: json.RawMessage(`{"days":7}`), Priority: prio}
	retried := events.TaskRetried{RetryTaskID: retryID, RetryNumber: 1, MaxRetries: 3}
	manual := events.TaskRetried{RetryTaskID: retryID, RetryNumber: 2, MaxRetries: 3, Manual: true}

	commands := []command{
		{"claim", func(t *events.Task) ([]events.Payload, error) { return t.Claim(me) }, map[string]outcome{
			"pending":           ok(events.TaskClaimed{WorkerID: me}),
			"pending/mine":      ok(events.TaskClaimed{WorkerID: me}),
			"pending/other":     forbidden,
			"pending/released":  ok(events.TaskClaimed{WorkerID: me}),
			"in_progress/mine":  transition,
			"in_progress/other": forbidden,
			"completed":         transition,
			"failed":            transition,
			"failed/retried":    transition,
			"failed/skipped":    transition,
			"failed/exhausted":  transition,
			"cancelled":         transition,
			"cancelled/claimed": transition,
		}},
		{"release", func(t *events.Task) ([]events.Payload, error) { return t.Release(me, "lunch") },
			holderRule(ok(events.TaskReleased{WorkerID: me, Reason: "lunch"}))},
		{"update by worker", func(t *events.Task) ([]events.Payload, error) { return t.PostUpdate("u1", me, "half way", true) },
			holderRule(ok(events.TaskUpdatePosted{UpdateID: "u1", AuthorID: me, Message: "half way"}))},
		{"update by admin", func(t *events.Task) ([]events.Payload, error) { return t.PostUpdate("u2", admin, "note", false) },
			every(ok(events.TaskUpdatePosted{UpdateID: "u2", AuthorID: admin, Message: "note"}), transition, keys(states)...)},
		{"result", func(t *events.Task) ([]events.Payload, error) {
			return t.PostResult(me, json.RawMessage(` {"ok":true} `))
		},
			holderRule(ok(events.TaskResultPosted{WorkerID: me, Result: json.RawMessage(`{"ok":true}`)}))},
		{"complete", func(t *events.Task) ([]events.Payload, error) { return t.Complete(me) },
			holderRule(ok(events.TaskCompleted{WorkerID: me}))},
		{"fail by worker", func(t *events.Task) ([]events.Payload, error) {
			return t.Fail(me, events.FailureError, "disk full", nil)
		},
			holderRule(ok(events.TaskFailed{WorkerID: me, Kind: events.FailureError, Reason: "disk full"}))},
		{"fail by system", func(t *events.Task) ([]events.Payload, error) {
			return t.Fail("", events.FailureTimeout, "took too long", json.RawMessage(`{"timeout_seconds":60}`))
		}, func() map[string]outcome {
			m := every(outcome{}, transition)
			m["in_progress/mine"] = ok(events.TaskFailed{WorkerID: me, Kind: events.FailureTimeout, Reason: "took too long", Evidence: json.RawMessage(`{"timeout_seconds":60}`)})
			m["in_progress/other"] = ok(events.TaskFailed{WorkerID: other, Kind: events.FailureTimeout, Reason: "took too long", Evidence: json.RawMessage(`{"timeout_seconds":60}`)})
			return m
		}()},
		{"cancel", func(t *events.Task) ([]events.Payload, error) { return t.Cancel(admin, "not needed") },
			every(ok(events.TaskCancelled{By: admin, Reason: "not needed"}), transition,
				"pending", "pending/mine", "pending/other", "pending/released", "in_progress/mine", "in_progress/other")},
		{"assign", func(t *events.Task) ([]events.Payload, error) { return t.Assign(me, admin, "expert") },
			every(ok(events.TaskAssigned{WorkerID: me, By: admin, Reason: "expert"}), transition,
				"pending", "pending/mine", "pending/other", "pending/released")},
		{"edit", func(t *events.Task) ([]events.Payload, error) {
			return t.Edit(events.TaskEdit{Title: &title, Description: &desc, Priority: &prio})
		}, every(ok(edited), transition, "pending", "pending/mine", "pending/other", "pending/released")},
		{"retried", func(t *events.Task) ([]events.Payload, error) { return t.Retried(retried) },
			every(ok(retried), transition, "failed")},
		{"manual retry", func(t *events.Task) ([]events.Payload, error) { return t.Retried(manual) },
			every(ok(manual), transition, "failed", "failed/skipped", "failed/exhausted")},
		{"retry skipped", func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped("bad input") },
			every(ok(events.TaskRetrySkipped{Reason: "bad input"}), transition, "failed")},
		{"retries exhausted", func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(0) },
			every(ok(events.TaskRetriesExhausted{Attempts: 1, MaxRetries: 0}), transition, "failed")},
	}

	for _, cmd := range commands {
		if len(cmd.expect) != len(states) {
			t.Fatalf("%s: expectations for %d states, want all %d", cmd.name, len(cmd.expect), len(states))
		}
		for _, state := range keys(states) {
			want, found := cmd.expect[state]
			if !found {
				t.Fatalf("%s: no expectation for state %s", cmd.name, state)
			}
			t.Run(cmd.name+"/from "+state, func(t *testing.T) {
				task := storyTask(states[state]...)
				before := *task
				got, err := cmd.run(task)
				checkOutcome(t, want, got, err)
				if !reflect.DeepEqual(*task, before) {
					t.Fatalf("decide changed the task:\n got %+v\nwant %+v", *task, before)
				}
				if err != nil {
					return
				}
				// The decided events fold onto the stream without surprise.
				next := storyTask(append(append([]events.Payload(nil), states[state]...), got...)...)
				if next.Version != task.Version+len(got) {
					t.Fatalf("version %d after %d events on version %d", next.Version, len(got), task.Version)
				}
			})
		}
	}
}

// storyTask is story without the envelopes, for chaining.
func storyTask(ps ...events.Payload) *events.Task {
	t, _ := story(ps...)
	return t
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestTaskValidation(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	empty, blank, longTitle := "", "   ", strings.Repeat("é", events.MaxTitleLen+1)
	longDesc := long(events.MaxDescriptionLen + 1)
	bogus := events.Priority("whenever")
	cases := []struct {
		name  string
		state string
		run   func(*events.Task) ([]events.Payload, error)
		want  outcome
	}{
		{"update without message", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.PostUpdate("u", me, "  \n", true) }, invalid("message")},
		{"update too long", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) {
			return t.PostUpdate("u", me, long(events.MaxMessageLen+1), true)
		}, invalid("message")},
		{"update by stranger checks ownership first", "in_progress/other", func(t *events.Task) ([]events.Payload, error) { return t.PostUpdate("u", me, "", true) }, forbidden},
		{"result null", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.PostResult(me, json.RawMessage(" null ")) }, invalid("result")},
		{"result empty", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.PostResult(me, nil) }, invalid("result")},
		{"result scalar is fine", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.PostResult(me, json.RawMessage(`42`)) },
			ok(events.TaskResultPosted{WorkerID: me, Result: json.RawMessage(`42`)})},
		{"fail with unknown kind", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.Fail(me, "meh", "x", nil) }, invalid("kind")},
		{"fail reason too long", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) {
			return t.Fail(me, events.FailureError, long(events.MaxReasonLen+1), nil)
		}, invalid("reason")},
		{"fail without reason gets one", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.Fail(me, events.FailureError, " ", nil) },
			ok(events.TaskFailed{WorkerID: me, Kind: events.FailureError, Reason: "no reason given"})},
		{"release reason too long", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) { return t.Release(me, long(events.MaxReasonLen+1)) }, invalid("reason")},
		{"cancel reason too long", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Cancel(admin, long(events.MaxReasonLen+1)) }, invalid("reason")},
		{"assign reason too long", "pending", func(t *events.Task) ([]events.Payload, error) {
			return t.Assign(me, admin, long(events.MaxReasonLen+1))
		}, invalid("reason")},
		{"edit empty title", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Title: &empty}) }, invalid("title")},
		{"edit blank title", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Title: &blank}) }, invalid("title")},
		{"edit long title", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Title: &longTitle}) }, invalid("title")},
		{"edit long description", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Description: &longDesc}) }, invalid("description")},
		{"edit params not an object", "pending", func(t *events.Task) ([]events.Payload, error) {
			return t.Edit(events.TaskEdit{Params: json.RawMessage(`[1]`)})
		}, invalid("params")},
		{"edit bogus priority", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Priority: &bogus}) }, invalid("priority")},
		{"edit nothing keeps everything", "pending", func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{}) },
			ok(events.TaskEdited{Title: "Write the report", Description: "weekly", Params: json.RawMessage(`{"days":7}`), Priority: events.PriorityHigh})},
		{"edit null params become {}", "pending", func(t *events.Task) ([]events.Payload, error) {
			return t.Edit(events.TaskEdit{Params: json.RawMessage(`null`)})
		}, ok(events.TaskEdited{Title: "Write the report", Description: "weekly", Params: json.RawMessage(`{}`), Priority: events.PriorityHigh})},
		{"edit of a claimed task is a transition even when invalid", "in_progress/mine", func(t *events.Task) ([]events.Payload, error) {
			return t.Edit(events.TaskEdit{Title: &empty})
		}, transition},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.run(storyTask(states[c.state]...))
			checkOutcome(t, c.want, got, err)
		})
	}
}

func TestNewTask(t *testing.T) {
	t.Parallel()
	tt := &events.TaskType{ID: typeID, TaskTypeSpec: events.TaskTypeSpec{Name: "report"}}
	archived := &events.TaskType{ID: typeID, TaskTypeSpec: events.TaskTypeSpec{Name: "report"}, Archived: true}
	at := t0.Add(time.Hour)
	cases := []struct {
		name string
		p    events.NewTaskParams
		tt   *events.TaskType
		want outcome
	}{
		{"defaults", events.NewTaskParams{Title: "  Report  ", CreatedBy: admin}, tt,
			ok(events.TaskCreated{Title: "Report", TaskTypeID: typeID, Params: json.RawMessage(`{}`), Priority: events.PriorityMedium, CreatedBy: admin})},
		{"assigned", events.NewTaskParams{Title: "Report", Priority: events.PriorityLow, Params: json.RawMessage(` {"a":1}`),
			AssignedTo: me, AssignReason: "knows it", CreatedBy: admin, AvailableAt: &at}, tt,
			ok(events.TaskCreated{Title: "Report", TaskTypeID: typeID, Params: json.RawMessage(`{"a":1}`), Priority: events.PriorityLow, CreatedBy: admin, AvailableAt: &at},
				events.TaskAssigned{WorkerID: me, By: admin, Reason: "knows it"})},
		{"retry of a parent", events.NewTaskParams{Title: "Report (retry 1)", RetryCount: 1, ParentTaskID: taskID}, tt,
			ok(events.TaskCreated{Title: "Report (retry 1)", TaskTypeID: typeID, Params: json.RawMessage(`{}`), Priority: events.PriorityMedium, RetryCount: 1, ParentTaskID: taskID})},
		{"no title", events.NewTaskParams{Title: " "}, tt, invalid("title")},
		{"long title", events.NewTaskParams{Title: strings.Repeat("a", events.MaxTitleLen+1)}, tt, invalid("title")},
		{"title of max runes", events.NewTaskParams{Title: strings.Repeat("é", events.MaxTitleLen)}, tt,
			ok(events.TaskCreated{Title: strings.Repeat("é", events.MaxTitleLen), TaskTypeID: typeID, Params: json.RawMessage(`{}`), Priority: events.PriorityMedium})},
		{"long description", events.NewTaskParams{Title: "a", Description: strings.Repeat("a", events.MaxDescriptionLen+1)}, tt, invalid("description")},
		{"bad priority", events.NewTaskParams{Title: "a", Priority: "soon"}, tt, invalid("priority")},
		{"no type", events.NewTaskParams{Title: "a"}, nil, invalid("task_type_id")},
		{"archived type", events.NewTaskParams{Title: "a"}, archived, outcome{err: "state:task_type_id"}},
		{"params array", events.NewTaskParams{Title: "a", Params: json.RawMessage(`[]`)}, tt, invalid("params")},
		{"params string", events.NewTaskParams{Title: "a", Params: json.RawMessage(`"x"`)}, tt, invalid("params")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := events.NewTask(c.p, c.tt)
			checkOutcome(t, c.want, got, err)
		})
	}
}

// TestFoldTask folds whole histories and compares every field.
func TestFoldTask(t *testing.T) {
	t.Parallel()
	at := func(min int) *time.Time { v := t0.Add(time.Duration(min) * time.Minute); return &v }
	str := func(s string) *string { return &s }
	later := t0.Add(2 * time.Hour)
	base := events.Task{
		ID: taskID, Title: "Write the report", Description: "weekly", TaskTypeID: typeID,
		Params: json.RawMessage(`{"days":7}`), Priority: events.PriorityHigh, Status: events.StatusPending,
		CreatedBy: str(admin), CreatedAt: t0, UpdatedAt: t0, AvailableAt: t0, Version: 1,
	}
	with := func(f func(*events.Task)) events.Task {
		t := base
		f(&t)
		return t
	}
	cases := []struct {
		name string
		evs  []events.Payload
		want events.Task
	}{
		{"created", nil, base},
		{"assigned then claimed by the assignee", []events.Payload{
			events.TaskAssigned{WorkerID: me, By: admin}, events.TaskClaimed{WorkerID: me},
		}, with(func(t *events.Task) {
			t.Status, t.AssignedTo, t.StartedAt, t.UpdatedAt, t.Version = events.StatusInProgress, str(me), at(2), *at(2), 3
		})},
		{"claimed, update, result, completed", []events.Payload{
			events.TaskClaimed{WorkerID: me},
			events.TaskUpdatePosted{UpdateID: "u", AuthorID: me, Message: "half"},
			events.TaskResultPosted{WorkerID: me, Result: json.RawMessage(`{"pages":3}`)},
			events.TaskCompleted{WorkerID: me},
		}, with(func(t *events.Task) {
			t.Status, t.AssignedTo, t.StartedAt = events.StatusCompleted, str(me), at(1)
			t.Result, t.CompletedAt, t.UpdatedAt, t.Version = json.RawMessage(`{"pages":3}`), at(4), *at(4), 5
		})},
		{"claimed, released, claimed by another", []events.Payload{
			events.TaskClaimed{WorkerID: me}, events.TaskReleased{WorkerID: me, Reason: "stuck"}, events.TaskClaimed{WorkerID: other},
		}, with(func(t *events.Task) {
			t.Status, t.AssignedTo, t.StartedAt, t.UpdatedAt, t.Version = events.StatusInProgress, str(other), at(3), *at(3), 4
		})},
		{"released back to the pool", []events.Payload{
			events.TaskClaimed{WorkerID: me}, events.TaskReleased{WorkerID: me},
		}, with(func(t *events.Task) { t.UpdatedAt, t.Version = *at(2), 3 })},
		{"failed then retried", []events.Payload{
			events.TaskClaimed{WorkerID: me}, failedEv(), events.TaskRetried{RetryTaskID: retryID, RetryNumber: 1, MaxRetries: 3},
		}, with(func(t *events.Task) {
			t.Status, t.AssignedTo, t.StartedAt, t.CompletedAt = events.StatusFailed, str(me), at(1), at(2)
			t.FailureKind, t.FailureReason = str(events.FailureError), str("boom")
			t.RetryOutcome, t.RetryTaskID, t.UpdatedAt, t.Version = str(events.RetryOutcomeRetried), str(retryID), *at(3), 4
		})},
		{"failed by the stuck detector, retries exhausted", []events.Payload{
			events.TaskClaimed{WorkerID: me},
			events.TaskFailed{WorkerID: me, Kind: events.FailureWorkerOffline, Reason: "silent", Evidence: json.RawMessage(`{"last_heartbeat":"x"}`)},
			events.TaskRetriesExhausted{Attempts: 4, MaxRetries: 3},
		}, with(func(t *events.Task) {
			t.Status, t.AssignedTo, t.StartedAt, t.CompletedAt = events.StatusFailed, str(me), at(1), at(2)
			t.FailureKind, t.FailureReason = str(events.FailureWorkerOffline), str("silent")
			t.RetryOutcome, t.UpdatedAt, t.Version = str(events.RetryOutcomeExhausted), *at(3), 4
		})},
		{"failed, skipped", []events.Payload{events.TaskClaimed{WorkerID: me}, failedEv(), events.TaskRetrySkipped{Reason: "bad input"}},
			with(func(t *events.Task) {
				t.Status, t.AssignedTo, t.StartedAt, t.CompletedAt = events.StatusFailed, str(me), at(1), at(2)
				t.FailureKind, t.FailureReason = str(events.FailureError), str("boom")
				t.RetryOutcome, t.UpdatedAt, t.Version = str(events.RetryOutcomeSkipped), *at(3), 4
			})},
		{"edited then cancelled", []events.Payload{
			events.TaskEdited{Title: "T2", Description: "D2", Params: json.RawMessage(`{"days":1}`), Priority: events.PriorityLow},
			events.TaskCancelled{By: admin, Reason: "dup"},
		}, with(func(t *events.Task) {
			t.Title, t.Description, t.Params, t.Priority = "T2", "D2", json.RawMessage(`{"days":1}`), events.PriorityLow
			t.Status, t.CompletedAt, t.UpdatedAt, t.Version = events.StatusCancelled, at(2), *at(2), 3
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, evs := story(c.evs...)
			if !reflect.DeepEqual(*got, c.want) {
				t.Fatalf("fold:\n got %+v\nwant %+v", *got, c.want)
			}
			// Folding one event at a time onto a copy gives the same task:
			// projections fold incrementally, replay folds at once.
			var inc events.Task
			for _, e := range evs {
				step := inc
				step.Apply(e)
				inc = step
			}
			if !reflect.DeepEqual(inc, c.want) {
				t.Fatalf("incremental fold differs:\n got %+v\nwant %+v", inc, c.want)
			}
		})
	}

	t.Run("retry task with parent and later availability", func(t *testing.T) {
		p := events.TaskCreated{Title: "R", TaskTypeID: typeID, Params: json.RawMessage(`{}`), Priority: events.PriorityMedium,
			RetryCount: 2, ParentTaskID: taskID, AvailableAt: &later}
		e := events.New(events.StreamTask, retryID, p, events.Meta{Actor: events.System("retry")}, t0)
		e.Version = 1
		got := events.FoldTask([]events.Envelope{e})
		want := events.Task{ID: retryID, Title: "R", TaskTypeID: typeID, Params: json.RawMessage(`{}`), Priority: events.PriorityMedium,
			Status: events.StatusPending, RetryCount: 2, ParentTaskID: str(taskID), CreatedAt: t0, UpdatedAt: t0, AvailableAt: later,
			Scheduled: true, Version: 1}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("fold:\n got %+v\nwant %+v", *got, want)
		}
	})
	t.Run("run_at: scheduled until due, an edit moves it", func(t *testing.T) {
		meta := events.Meta{Actor: events.System("test")}
		p := events.TaskCreated{Title: "Later", TaskTypeID: typeID, Params: json.RawMessage(`{}`), Priority: events.PriorityMedium, AvailableAt: &later}
		stream := []events.Envelope{events.New(events.StreamTask, taskID, p, meta, t0)}
		stream[0].Version = 1
		add := func(p events.Payload, at time.Time) *events.Task {
			e := events.New(events.StreamTask, taskID, p, meta, at)
			e.Version = len(stream) + 1
			stream = append(stream, e)
			return events.FoldTask(stream)
		}
		task := events.FoldTask(stream)
		if !task.Scheduled {
			t.Fatal("a task created with a later run_at is not scheduled")
		}
		if _, err := task.Due(later.Add(-time.Second)); err == nil {
			t.Fatal("due before its run_at")
		}
		soon := t0.Add(time.Minute)
		ps, err := task.Edit(events.TaskEdit{RunAt: &soon})
		if err != nil {
			t.Fatal(err)
		}
		if task = add(ps[0], t0.Add(time.Second)); !task.Scheduled || !task.AvailableAt.Equal(soon) {
			t.Fatalf("after the edit: scheduled %v, available at %v", task.Scheduled, task.AvailableAt)
		}
		ps, err = task.Due(soon)
		if err != nil {
			t.Fatal(err)
		}
		if task = add(ps[0], soon); task.Scheduled || task.Status != events.StatusPending {
			t.Fatalf("after task.due: scheduled %v, %s", task.Scheduled, task.Status)
		}
		if _, err := task.Due(soon); err == nil {
			t.Fatal("due twice")
		}
		past := t0
		ps, err = task.Edit(events.TaskEdit{RunAt: &past})
		if err != nil {
			t.Fatal(err)
		}
		if task = add(ps[0], soon.Add(time.Second)); task.Scheduled {
			t.Fatal("a run_at moved into the past still waits")
		}
		year := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		if _, err := task.Edit(events.TaskEdit{RunAt: &year}); !errors.Is(err, events.ErrInvalid) {
			t.Fatalf("run_at in the year 10000: %v", err)
		}
	})
	t.Run("empty stream", func(t *testing.T) {
		if got := events.FoldTask(nil); got != nil {
			t.Fatalf("FoldTask(nil) = %+v", got)
		}
	})
}

// TestEventRoundTrip stores every decided payload as JSON and decodes it
// back: what the store reads must fold to what was decided.
func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	_, evs := story(events.TaskAssigned{WorkerID: me, By: admin, Reason: "r"}, events.TaskClaimed{WorkerID: me},
		events.TaskUpdatePosted{UpdateID: "u", AuthorID: me, Message: "m"},
		events.TaskResultPosted{WorkerID: me, Result: json.RawMessage(`{"x":[1,2]}`)},
		events.TaskFailed{WorkerID: me, Kind: events.FailureTimeout, Reason: "slow", Evidence: json.RawMessage(`{"timeout_seconds":5}`)},
		events.TaskRetried{RetryTaskID: retryID, RetryNumber: 1, MaxRetries: 2, Hint: "h", Manual: true})
	decoded := make([]events.Envelope, len(evs))
	for i, e := range evs {
		data, err := json.Marshal(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		d := e
		d.Payload, d.Data = nil, data
		if err := d.Decode(); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(d.Payload, e.Payload) {
			t.Fatalf("%s round trip:\n got %#v\nwant %#v", e.Type, d.Payload, e.Payload)
		}
		decoded[i] = d
	}
	if !reflect.DeepEqual(events.FoldTask(decoded), events.FoldTask(evs)) {
		t.Fatal("fold of decoded events differs")
	}
	bad := events.Envelope{Type: "task.exploded", Data: []byte(`{}`)}
	if err := bad.Decode(); err == nil {
		t.Fatal("unknown type decoded")
	}
	for _, name := range events.Types() {
		if !events.KnownType(name) {
			t.Fatalf("%s listed but unknown", name)
		}
	}
}
