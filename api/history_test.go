package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

func TestTaskHistoryShowsActorsCausationAndSummaries(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{})
	genesis := e.worker("Genesis", 1)

	task, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "Crawl NVDA", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)
	claimed, err := genesis.Claim(e.ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, claimed.ID)
	require.NoError(t, genesis.PostUpdate(e.ctx, task.ID, "fetched page 1\nof 3"))
	require.NoError(t, genesis.PostResult(e.ctx, task.ID, map[string]int{"posts": 12}))
	_, err = genesis.Fail(e.ctx, task.ID, "Arctic Shift API returned 429")
	require.NoError(t, err)

	// The retry reactor's way: a system actor, caused by the failure.
	failedEvs, err := e.admin.TaskEvents(e.ctx, task.ID)
	require.NoError(t, err)
	failedSeq := failedEvs[len(failedEvs)-1].Seq
	var retry *events.Task
	e.inTx(func(tx pgx.Tx) error {
		retry, err = e.db.CreateRetry(e.ctx, tx, task.ID, store.RetryParams{Hint: "Use 3-5 s between requests.",
			Meta: events.Meta{Actor: events.System("retry"), CausationSeq: failedSeq}})
		return err
	})

	evs, err := e.admin.TaskEvents(e.ctx, task.ID)
	require.NoError(t, err)
	type line struct{ typ, actor, summary string }
	var got []line
	for _, ev := range evs {
		name := ev.Actor.Name
		if name == "" {
			name = string(ev.Actor.Kind) + ":" + ev.Actor.ID
		}
		got = append(got, line{ev.Type, name, ev.Summary})
		require.Equal(t, task.ID, ev.StreamID)
		require.False(t, ev.OccurredAt.IsZero())
	}
	require.Equal(t, []line{
		{"task.created", "Ada Admin", `created "Crawl NVDA" (medium)`},
		{"task.claimed", "Genesis", "claimed by Genesis"},
		{"task.update_posted", "Genesis", "update from Genesis: fetched page 1 of 3"},
		{"task.result_posted", "Genesis", "result posted by Genesis (13 bytes)"},
		{"task.failed", "Genesis", "failed (error): Arctic Shift API returned 429"},
		{"task.retried", "system:retry", "retry #1 created: " + retry.ID + ", hint: Use 3-5 s between requests."},
		{"task.update_posted", "system:retry", "update from retry: Retry #1 created: " + retry.ID},
	}, got)
	last := evs[len(evs)-2]
	require.Equal(t, failedSeq, last.CausationSeq, "causation is surfaced")
	require.Equal(t, task.ID, last.CorrelationID, "a retry chain correlates to its root")
	require.Equal(t, events.ActorSystem, last.Actor.Kind)

	// The retry's own stream says where it came from.
	revs, err := e.admin.TaskEvents(e.ctx, retry.ID)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf(`created "Crawl NVDA (retry 1)" (medium) as retry #1 of %s`, task.ID[:8]), revs[0].Summary)

	// Not a task: 404; not a UUID: 400 naming the field.
	_, err = e.admin.TaskEvents(e.ctx, genesis.ID)
	require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
	_, err = e.admin.TaskEvents(e.ctx, "nope")
	requireField(t, err, "id")
}

func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status, "%v", err)
	require.Equal(t, field, apiErr.Field, "%v", err)
}

// snapshot is a task as the API showed it during the run, and when.
type snapshot struct {
	from, to time.Time // the request's start and end: the state held throughout
	task     events.Task
}

// TestTaskAsOfEqualsWhatWasObserved drives many tasks at once, each through a
// random life, records every state the API showed and when, then asks for
// random tasks at random instants inside those windows.
func TestTaskAsOfEqualsWhatWasObserved(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{})
	workers := []*histWorker{e.worker("Genesis", 50), e.worker("Exodus", 50), e.worker("Leviticus", 50)}
	const tasks = 24

	var mu sync.Mutex
	seen := map[string][]snapshot{}
	created := map[string]time.Time{}
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			observe := func(id string) {
				from := time.Now()
				d, err := e.admin.Task(e.ctx, id)
				to := time.Now()
				require.NoError(t, err)
				mu.Lock()
				seen[id] = append(seen[id], snapshot{from: from, to: to, task: d.Task})
				mu.Unlock()
			}
			before := time.Now()
			task, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: fmt.Sprintf("task %d", i), TaskTypeID: e.taskType.ID,
				Priority: events.PriorityHigh})
			require.NoError(t, err)
			mu.Lock()
			created[task.ID] = before
			mu.Unlock()
			observe(task.ID)
			w := workers[rng.IntN(len(workers))]
			wMeta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
			aMeta := events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: e.adminID}}
			for step := 0; step < 12; step++ {
				cur, err := e.db.GetTask(e.ctx, e.pool, task.ID)
				require.NoError(t, err)
				if cur.Status.Terminal() {
					break
				}
				var decide store.TaskDecision
				meta := wMeta
				switch cur.Status {
				case events.StatusPending:
					switch rng.IntN(4) {
					case 0:
						meta = aMeta
						title := fmt.Sprintf("task %d edited %d", i, step)
						decide = func(t *events.Task) ([]events.Payload, error) { return t.Edit(events.TaskEdit{Title: &title}) }
					case 1:
						meta = aMeta
						decide = func(t *events.Task) ([]events.Payload, error) { return t.Assign(w.ID, e.adminID, "you know this one") }
					default:
						decide = func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) }
					}
				case events.StatusInProgress:
					switch rng.IntN(7) {
					case 0:
						decide = func(t *events.Task) ([]events.Payload, error) { return t.Release(w.ID, "blocked") }
					case 1:
						decide = func(t *events.Task) ([]events.Payload, error) {
							return t.PostResult(w.ID, json.RawMessage(fmt.Sprintf(`{"step": %d, "ok": true}`, step)))
						}
					case 2:
						decide = func(t *events.Task) ([]events.Payload, error) { return t.Complete(w.ID) }
					case 3:
						decide = func(t *events.Task) ([]events.Payload, error) {
							return t.Fail(w.ID, events.FailureError, "it broke", nil)
						}
					case 4:
						meta = aMeta
						decide = func(t *events.Task) ([]events.Payload, error) { return t.Cancel(e.adminID, "enough") }
					default:
						decide = func(t *events.Task) ([]events.Payload, error) {
							return t.PostUpdate(fmt.Sprintf("0190c6e2-9bd4-7c8a-b6a1-%012d", i*100+step), w.ID, "progress", true)
						}
					}
				}
				_, _, err = e.db.UpdateTask(e.ctx, e.pool, task.ID, meta, decide)
				require.NoError(t, err)
				observe(task.ID)
			}
		})
	}
	wg.Wait()

	rng := rand.New(rand.NewPCG(42, 42))
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	checked := 0
	for range 150 {
		id := ids[rng.IntN(len(ids))]
		snaps := seen[id]
		s := snaps[rng.IntN(len(snaps))]
		at := s.from.Add(time.Duration(rng.Int64N(int64(s.to.Sub(s.from)) + 1)))
		got, err := e.admin.TaskAt(e.ctx, id, at)
		require.NoError(t, err)
		want, _ := json.Marshal(s.task)
		have, _ := json.Marshal(got)
		require.JSONEq(t, string(want), string(have), "task %s at %s", id, at.Format(time.RFC3339Nano))
		checked++
	}
	t.Logf("as-of checked at %d random instants over %d tasks", checked, len(ids))

	// Before it existed: 404. Now: the projection. A bad time: 400 on at.
	for id, before := range created {
		_, err := e.admin.TaskAt(e.ctx, id, before.Add(-time.Millisecond))
		require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
		now, err := e.admin.TaskAt(e.ctx, id, time.Now().Add(time.Hour))
		require.NoError(t, err)
		d, err := e.admin.Task(e.ctx, id)
		require.NoError(t, err)
		require.Equal(t, d.Version, now.Version)
		break
	}
	err := e.admin.Do(e.ctx, http.MethodGet, "/api/v1/admin/workers/tasks/"+ids[0]+"?at=yesterday", nil, nil)
	requireField(t, err, "at")
	_, err = e.admin.TaskAt(e.ctx, "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a", time.Now())
	require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
}

// failAs fails the task w holds, as the worker or (offline) as the stuck detector.
func (e *histEnv) fail(t *testing.T, id string, w *histWorker, kind, reason string) {
	t.Helper()
	if kind == events.FailureError {
		_, err := w.Fail(e.ctx, id, reason)
		require.NoError(t, err)
		return
	}
	_, _, err := e.db.UpdateTask(e.ctx, e.pool, id, events.Meta{Actor: events.System("stuck-detector")},
		func(t *events.Task) ([]events.Payload, error) {
			return t.Fail("", kind, reason, json.RawMessage(`{"last_heartbeat":"2026-11-21T23:00:00Z","threshold_seconds":600}`))
		})
	require.NoError(t, err)
}

func (e *histEnv) retry(t *testing.T, id, hint string) *events.Task {
	t.Helper()
	var retry *events.Task
	e.inTx(func(tx pgx.Tx) error {
		var err error
		retry, err = e.db.CreateRetry(e.ctx, tx, id, store.RetryParams{Hint: hint, Meta: events.Meta{Actor: events.System("retry")}})
		return err
	})
	return retry
}

func TestChainOfATaskFailedTwice(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{})
	genesis, exodus := e.worker("Genesis", 1), e.worker("Exodus", 1)

	orig, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "Crawl NVDA", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)
	_, err = genesis.Claim(e.ctx)
	require.NoError(t, err)
	e.fail(t, orig.ID, genesis, events.FailureError, "rate limited")
	r1 := e.retry(t, orig.ID, "slow down")
	got, err := exodus.Claim(e.ctx)
	require.NoError(t, err)
	require.Equal(t, r1.ID, got.ID)
	e.fail(t, r1.ID, exodus, events.FailureWorkerOffline, "Worker Exodus went offline")
	r2 := e.retry(t, r1.ID, "")
	_, err = genesis.Claim(e.ctx)
	require.NoError(t, err)

	for _, id := range []string{orig.ID, r1.ID, r2.ID} {
		ch, err := e.admin.TaskChain(e.ctx, id)
		require.NoError(t, err)
		require.Equal(t, id, ch.TaskID)
		require.Len(t, ch.Attempts, 3)
		a := ch.Attempts
		require.Equal(t, []string{orig.ID, r1.ID, r2.ID}, []string{a[0].TaskID, a[1].TaskID, a[2].TaskID})
		require.Equal(t, []int{1, 2, 3}, []int{a[0].Attempt, a[1].Attempt, a[2].Attempt})

		require.Equal(t, events.StatusFailed, a[0].Status)
		require.Equal(t, &store.WorkerRef{ID: genesis.ID, Name: "Genesis"}, a[0].Worker)
		require.Equal(t, "error", *a[0].FailureKind)
		require.Equal(t, "rate limited", *a[0].FailureReason)
		require.Nil(t, a[0].Hint, "the original was given no hint")
		require.Equal(t, "retried", *a[0].RetryOutcome)
		require.NotNil(t, a[0].DurationSeconds)
		require.InDelta(t, a[0].CompletedAt.Sub(*a[0].StartedAt).Seconds(), *a[0].DurationSeconds, 1e-6)

		require.Equal(t, "Exodus", a[1].Worker.Name)
		require.Equal(t, "worker_offline", *a[1].FailureKind)
		require.Equal(t, "Worker Exodus went offline", *a[1].FailureReason)
		require.Equal(t, "slow down", *a[1].Hint)

		require.Equal(t, events.StatusInProgress, a[2].Status)
		require.Equal(t, "Genesis", a[2].Worker.Name)
		require.NotNil(t, a[2].StartedAt)
		require.Nil(t, a[2].CompletedAt)
		require.Nil(t, a[2].DurationSeconds)
		require.Nil(t, a[2].Hint, "an empty hint is no hint")
	}

	// A task that was never retried is a chain of one.
	solo, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "solo", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)
	ch, err := e.admin.TaskChain(e.ctx, solo.ID)
	require.NoError(t, err)
	require.Len(t, ch.Attempts, 1)
	require.Nil(t, ch.Attempts[0].Worker)

	_, err = e.admin.TaskChain(e.ctx, "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a")
	require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
	_, err = e.admin.TaskChain(e.ctx, "not-a-uuid")
	requireField(t, err, "id")
}

func TestPreviousAttemptsTellARetryWhatWentWrong(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{})
	genesis, exodus := e.worker("Genesis", 1), e.worker("Exodus", 1)

	orig, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "Crawl NVDA", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)

	// An original carries no previous_attempts at all (and costs no query).
	var raw json.RawMessage
	require.NoError(t, genesis.Do(e.ctx, http.MethodPost, "/api/v1/worker/tasks/claim", nil, &raw))
	require.NotContains(t, string(raw), "previous_attempts")

	for i := 1; i <= 7; i++ {
		msg := fmt.Sprintf("step %d", i)
		if i == 6 {
			msg = strings.Repeat("é", 2000) // cut to 500 runes
		}
		require.NoError(t, genesis.PostUpdate(e.ctx, orig.ID, msg))
	}
	big := map[string]string{"log": strings.Repeat("x", 5000)}
	require.NoError(t, genesis.PostResult(e.ctx, orig.ID, big))
	e.fail(t, orig.ID, genesis, events.FailureError, "Arctic Shift API returned 429 after 50 calls")
	retry := e.retry(t, orig.ID, "Use longer delays (3-5 s) between requests and smaller batches.")

	got, err := exodus.Claim(e.ctx)
	require.NoError(t, err)
	require.Equal(t, retry.ID, got.ID)
	require.Len(t, got.PreviousAttempts, 1)
	a := got.PreviousAttempts[0]
	require.Equal(t, orig.ID, a.TaskID)
	require.Equal(t, 1, a.Attempt)
	require.Equal(t, events.StatusFailed, a.Status)
	require.Equal(t, &store.WorkerRef{ID: genesis.ID, Name: "Genesis"}, a.Worker)
	require.Equal(t, "error", *a.FailureKind)
	require.Equal(t, "Arctic Shift API returned 429 after 50 calls", *a.FailureReason)
	require.Equal(t, "Use longer delays (3-5 s) between requests and smaller batches.", *a.HintForNext)
	require.NotNil(t, a.DurationSeconds)
	// 7 messages from the worker and the retry's note: the last 5, oldest first.
	require.Equal(t, 8, a.UpdatesTotal)
	require.Len(t, a.LastUpdates, store.AttemptUpdates)
	require.Equal(t, "step 4", a.LastUpdates[0].Message)
	require.Equal(t, "Genesis", a.LastUpdates[0].Author)
	require.Equal(t, strings.Repeat("é", store.AttemptMessageBytes/2)+"…", a.LastUpdates[2].Message)
	require.True(t, a.LastUpdates[2].Truncated)
	require.Equal(t, "step 7", a.LastUpdates[3].Message)
	require.Equal(t, "Retry #1 created: "+retry.ID, a.LastUpdates[4].Message)
	require.Equal(t, "system", a.LastUpdates[4].Author)
	// The result is too big to pass whole: its beginning, as a string.
	require.True(t, a.ResultTruncated)
	require.Greater(t, a.ResultBytes, 5000)
	var cut string
	require.NoError(t, json.Unmarshal(a.Result, &cut))
	require.True(t, strings.HasPrefix(cut, `{"log": "xxx`), cut[:20])
	require.LessOrEqual(t, len(cut), store.AttemptResultBytes+len("…"))

	// Reading the task again gives the same story.
	again, err := exodus.MyTask(e.ctx, retry.ID)
	require.NoError(t, err)
	require.Equal(t, got.PreviousAttempts, again.PreviousAttempts)

	// A second failure: the retry of the retry hears about both, oldest first,
	// with the evidence of an automatic failure.
	e.fail(t, retry.ID, exodus, events.FailureWorkerOffline, "Worker Exodus went offline")
	r2 := e.retry(t, retry.ID, "")
	got, err = genesis.Claim(e.ctx)
	require.NoError(t, err)
	require.Equal(t, r2.ID, got.ID)
	require.Len(t, got.PreviousAttempts, 2)
	require.Equal(t, []int{1, 2}, []int{got.PreviousAttempts[0].Attempt, got.PreviousAttempts[1].Attempt})
	b := got.PreviousAttempts[1]
	require.Equal(t, "Exodus", b.Worker.Name)
	require.Equal(t, "worker_offline", *b.FailureKind)
	require.JSONEq(t, `{"last_heartbeat":"2026-11-21T23:00:00Z","threshold_seconds":600}`, string(b.FailureEvidence))
	require.True(t, isNull(b.Result), "no result was posted")
	require.Nil(t, b.HintForNext, "the second retry got no hint")
}

// TestPreviousAttemptsAreBounded builds a lineage of 13 verbose failures and
// checks what the 13th retry receives: at most 10 attempts in at most 16 KiB,
// the nearest ones whole.
func TestPreviousAttemptsAreBounded(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{})
	genesis := e.worker("Genesis", 1)
	task, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "Verbose", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)
	id := task.ID
	for n := range 13 {
		got, err := genesis.Claim(e.ctx)
		require.NoError(t, err)
		require.Equal(t, id, got.ID)
		for u := range 6 {
			require.NoError(t, genesis.PostUpdate(e.ctx, id, fmt.Sprintf("attempt %d message %d ", n, u)+strings.Repeat("m", 3000)))
		}
		require.NoError(t, genesis.PostResult(e.ctx, id, map[string]string{"out": strings.Repeat("r", 4000)}))
		e.fail(t, id, genesis, events.FailureError, strings.Repeat("why ", 1000))
		id = e.retry(t, id, strings.Repeat("hint ", 500)).ID
	}
	got, err := genesis.Claim(e.ctx)
	require.NoError(t, err)
	require.Equal(t, id, got.ID)
	require.Equal(t, 13, got.RetryCount)

	as := got.PreviousAttempts
	require.Len(t, as, store.MaxPreviousAttempts, "the nearest 10 of 13")
	size, err := json.Marshal(as)
	require.NoError(t, err)
	require.LessOrEqual(t, len(size), store.PreviousAttemptsBudget)
	t.Logf("previous_attempts: %d attempts, %d bytes", len(as), len(size))
	for i := range as {
		require.Equal(t, 4+i, as[i].Attempt, "consecutive, oldest first")
		require.Equal(t, "error", *as[i].FailureKind, "every attempt says how it failed")
		require.NotNil(t, as[i].HintForNext)
	}
	nearest := as[len(as)-1]
	require.Equal(t, 13, nearest.Attempt, "the attempt just before is always there")
	require.False(t, nearest.DetailsOmitted, "with its details")
	require.Len(t, nearest.LastUpdates, store.AttemptUpdates)
	require.True(t, nearest.ResultTruncated)
	require.Len(t, *nearest.FailureReason, store.AttemptReasonBytes+len("…"), "reason cut with an ellipsis")
	require.Len(t, *nearest.HintForNext, store.AttemptReasonBytes+len("…"))
	older := as[0]
	require.True(t, older.DetailsOmitted, "older attempts are compact when the budget is short")
	require.Empty(t, older.LastUpdates)
	require.True(t, isNull(older.Result))
	require.Len(t, *older.FailureReason, store.AttemptCompactBytes+len("…"), "but still say why they failed")
}

func TestEventsAPIPagesEveryEventOnceInConsumerOrder(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{})
	workers := []*histWorker{e.worker("Genesis", 100), e.worker("Exodus", 100), e.worker("Leviticus", 100)}

	// Page while writers append concurrently, then until caught up.
	type query struct {
		name string
		q    client.EventQuery
	}
	someTask, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "watched", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)
	queries := []query{
		{"all", client.EventQuery{Limit: 7}},
		{"types", client.EventQuery{Limit: 5, Types: []string{"task.claimed", "task.completed"}}},
		{"worker", client.EventQuery{Limit: 9, WorkerID: workers[1].ID}},
		{"worker+type", client.EventQuery{Limit: 3, WorkerID: workers[2].ID, Types: []string{"task.update_posted"}}},
		{"stream", client.EventQuery{Limit: 2, StreamID: someTask.ID}},
	}
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			_, err := e.workload(ctx, workers, uint64(i), 40, 0)
			require.NoError(t, err)
		})
	}
	got := make([][]string, len(queries))
	visible := make(chan struct{}) // closed when every event is visible to consumers
	var pg sync.WaitGroup
	for qi, q := range queries {
		pg.Go(func() {
			after := "0"
			for {
				final := false
				select {
				case <-visible:
					final = true
				default:
				}
				page, err := e.admin.Events(e.ctx, func() client.EventQuery { x := q.q; x.After = after; return x }())
				require.NoError(t, err)
				for _, ev := range page.Events {
					got[qi] = append(got[qi], ev.Position)
				}
				require.NotEmpty(t, page.Next)
				after = page.Next
				if final && len(page.Events) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	stop()
	all := e.allEvents()
	close(visible)
	pg.Wait()

	for qi, q := range queries {
		var want []string
		for _, ev := range all {
			if matchesFilter(ev, q.q.Types, q.q.StreamID, q.q.WorkerID) {
				want = append(want, ev.Position().String())
			}
		}
		require.NotEmpty(t, want, q.name)
		require.Equal(t, want, got[qi], "%s: every event once, in consumer order", q.name)
	}

	// The repeated form of type equals the comma form.
	var rep api.EventPage
	require.NoError(t, e.admin.Do(e.ctx, http.MethodGet, "/api/v1/admin/events?after=0&limit=1000&type=task.claimed&type=task.completed", nil, &rep))
	require.Len(t, rep.Events, len(got[1]))

	// Every parameter is validated, naming the field.
	for param, field := range map[string]string{
		"after=12": "after", "after=1-2-3": "after", "limit=0": "limit", "limit=1001": "limit", "limit=x": "limit",
		"type=task.nope": "type", "type=task.claimed,,bogus": "type", "stream_id=42": "stream_id", "worker_id=x": "worker_id",
	} {
		err := e.admin.Do(e.ctx, http.MethodGet, "/api/v1/admin/events?"+param, nil, nil)
		requireField(t, err, field)
	}
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
