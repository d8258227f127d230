package reactors_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

func retryParams(manual bool, hint string) store.RetryParams {
	return store.RetryParams{Manual: manual, Hint: hint, Meta: events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: "admin"}}}
}

// manualRetry is what the admin route does.
func manualRetry(t *testing.T, e *env, id, hint string) *events.Task {
	t.Helper()
	var retry *events.Task
	err := e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		var err error
		retry, err = e.db.CreateRetry(e.ctx, tx, id, retryParams(true, hint))
		return err
	})
	require.NoError(t, err)
	return retry
}

func TestRetryChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{Name: "reddit_crawl", MaxRetries: 3})
	w := e.worker("Crawler One", 1)
	e.retryReactor("a", nil)

	original := e.createTask(tt, "Reddit Crawl for NVDA", "Crawl r/stocks for NVDA posts.")
	current := original
	for attempt := 1; attempt <= 4; attempt++ {
		claimed := e.claim(w)
		require.NotNil(t, claimed, "attempt %d must be claimable", attempt)
		require.Equal(t, current.ID, claimed.ID)
		reason := fmt.Sprintf("Arctic Shift API returned 429 after %d calls", attempt*10)
		e.fail(w, current.ID, reason)
		failed := e.decided(current.ID)
		evs := e.stream(current.ID)
		failedEv := ofType(evs, "task.failed")
		require.Len(t, failedEv, 1)

		if attempt == 4 {
			require.Equal(t, events.RetryOutcomeExhausted, *failed.RetryOutcome)
			ex := ofType(evs, "task.retries_exhausted")
			require.Len(t, ex, 1, "exhausted exactly once")
			require.Equal(t, events.TaskRetriesExhausted{Attempts: 4, MaxRetries: 3}, ex[0].Payload)
			require.Empty(t, ofType(evs, "task.retried"))
			require.Equal(t, events.ActorSystem, ex[0].Meta.Actor.Kind)
			require.Equal(t, failedEv[0].Seq, ex[0].Meta.CausationSeq)
			require.Equal(t, original.ID, ex[0].Meta.CorrelationID)
			break
		}

		require.Equal(t, events.RetryOutcomeRetried, *failed.RetryOutcome)
		retried := ofType(evs, "task.retried")
		require.Len(t, retried, 1)
		p := retried[0].Payload.(events.TaskRetried)
		require.Equal(t, attempt, p.RetryNumber)
		require.Equal(t, 3, p.MaxRetries)
		require.Empty(t, p.Hint)
		require.Equal(t, *failed.RetryTaskID, p.RetryTaskID)
		require.Equal(t, events.Actor{Kind: events.ActorSystem, ID: "retry"}, retried[0].Meta.Actor)
		require.Equal(t, failedEv[0].Seq, retried[0].Meta.CausationSeq)
		require.Equal(t, original.ID, retried[0].Meta.CorrelationID)

		updates := ofType(evs, "task.update_posted")
		require.Len(t, updates, 1)
		require.Equal(t, fmt.Sprintf("Retry #%d created: %s", attempt, p.RetryTaskID),
			updates[0].Payload.(events.TaskUpdatePosted).Message)

		retry := e.get(p.RetryTaskID)
		require.Equal(t, fmt.Sprintf("Reddit Crawl for NVDA (retry %d)", attempt), retry.Title)
		require.Equal(t, current.ID, *retry.ParentTaskID)
		require.Equal(t, attempt, retry.RetryCount)
		require.Equal(t, events.StatusPending, retry.Status)
		require.Nil(t, retry.AssignedTo)
		require.Equal(t, tt.ID, retry.TaskTypeID)
		require.JSONEq(t, `{"ticker":"NVDA"}`, string(retry.Params))
		require.Equal(t, events.PriorityHigh, retry.Priority)
		require.Equal(t, fmt.Sprintf("Crawl r/stocks for NVDA posts.\n\nPREVIOUS ATTEMPT FAILED: %s\nThis is retry %d of 3.",
			reason, attempt), retry.Description, "one failure section, the latest")
		created := e.stream(retry.ID)[0]
		require.Equal(t, original.ID, created.Meta.CorrelationID)
		current = retry
	}
	// The projection of every task in the chain is the fold of its stream.
	for id := current.ID; id != ""; {
		task := e.get(id)
		require.Equal(t, events.FoldTask(e.stream(id)), task)
		id = ""
		if task.ParentTaskID != nil {
			id = *task.ParentTaskID
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 3, RetryBackoffSeconds: 30})
	w := e.worker("Backoff Worker", 1)
	e.retryReactor("a", nil)

	task := e.createTask(tt, "Flaky", "")
	require.NotNil(t, e.claim(w))
	for n, want := range []time.Duration{30 * time.Second, 60 * time.Second} {
		e.fail(w, task.ID, "flaky")
		failed := e.decided(task.ID)
		retry := e.get(*failed.RetryTaskID)
		require.Equal(t, n+1, retry.RetryCount)
		require.Equal(t, "PREVIOUS ATTEMPT FAILED: flaky\nThis is retry "+fmt.Sprint(n+1)+" of 3.", retry.Description)
		require.Equal(t, want, retry.AvailableAt.Sub(*failed.CompletedAt), "base × 2^(N-1) after the failure")
		require.Nil(t, e.claim(w), "not claimable during the backoff")
		e.clock.Advance(want + time.Second)
		_, err := e.db.MakeDue(e.ctx, 10) // what each instance's due timer does
		require.NoError(t, err)
		claimed := e.claim(w)
		require.NotNil(t, claimed)
		require.Equal(t, retry.ID, claimed.ID)
		task = retry
	}
	require.Equal(t, time.Hour, events.RetryBackoff(3600, 5), "capped at one hour")
	require.Equal(t, 40*time.Minute, events.RetryBackoff(300, 4))
}

func TestRetryTexts(t *testing.T) {
	t.Parallel()
	require.Equal(t, "Crawl (retry 1)", events.RetryTitle("Crawl", 1))
	require.Equal(t, "Crawl (retry 3)", events.RetryTitle("Crawl (retry 2)", 3))
	require.Equal(t, "Crawl (retry 2) again (retry 3)", events.RetryTitle("Crawl (retry 2) again", 3))
	long := events.RetryTitle(strings.Repeat("é", events.MaxTitleLen), 7)
	require.Equal(t, events.MaxTitleLen, len([]rune(long)))
	require.True(t, strings.HasSuffix(long, "… (retry 7)"))

	d := events.RetryDescription("Do it.", events.RetryText{Reason: "boom", N: 1, MaxRetries: 2, Hint: "Go slower."})
	require.Equal(t, "Do it.\n\nPREVIOUS ATTEMPT FAILED: boom\nThis is retry 1 of 2.\nGo slower.", d)
	d2 := events.RetryDescription(d, events.RetryText{Reason: "bang", N: 2, MaxRetries: 2})
	require.Equal(t, "Do it.\n\nPREVIOUS ATTEMPT FAILED: bang\nThis is retry 2 of 2.", d2)
	d3 := events.RetryDescription(d2, events.RetryText{Reason: "bang", N: 3, MaxRetries: 2, Manual: true})
	require.Equal(t, "Do it.\n\nPREVIOUS ATTEMPT FAILED: bang\nThis is retry 3, ordered by hand after the type's 2 automatic retries.", d3)
	huge := events.RetryDescription(strings.Repeat("x", events.MaxDescriptionLen), events.RetryText{Reason: "r", N: 1, MaxRetries: 1})
	require.LessOrEqual(t, len(huge), events.MaxDescriptionLen)
	require.True(t, strings.HasSuffix(huge, "PREVIOUS ATTEMPT FAILED: r\nThis is retry 1 of 1."))
}

// A type with max_retries 0 exhausts at once; a cancelled task is no failure.
func TestRetryNoRetriesAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	none := e.taskType(events.TaskTypeSpec{MaxRetries: 0})
	some := e.taskType(events.TaskTypeSpec{MaxRetries: 2})
	w := e.worker("Worker", 2)
	e.retryReactor("a", nil)

	one := e.createTask(none, "Once only", "")
	require.NotNil(t, e.claim(w))
	e.fail(w, one.ID, "nope")
	require.Equal(t, events.RetryOutcomeExhausted, *e.decided(one.ID).RetryOutcome)

	cancelled := e.createTask(some, "Cancelled", "")
	_, _, err := e.db.UpdateTask(e.ctx, e.pool, cancelled.ID, system, func(t *events.Task) ([]events.Payload, error) {
		return t.Cancel("", "not needed")
	})
	require.NoError(t, err)
	// A later failure is decided, so the reactor has passed the cancel by then.
	later := e.createTask(some, "Later", "")
	require.NotNil(t, e.claim(w))
	e.fail(w, later.ID, "x")
	e.decided(later.ID)
	require.Nil(t, e.get(cancelled.ID).RetryOutcome)
	page, err := e.db.ListTasks(e.ctx, store.TaskFilter{Retries: true})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1, "only the failed task got a retry")
}

// Manual retries (the admin route runs store.CreateRetry in a transaction):
// allowed after exhaustion, refused twice, and the reactor leaves a failure
// that an admin retried first alone.
func TestManualRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 0})
	w := e.worker("Worker", 2)

	task := e.createTask(tt, "Exhausted", "Original.")
	require.NotNil(t, e.claim(w))
	e.fail(w, task.ID, "out of disk")
	// By hand before the reactor runs: the reactor must then leave it alone.
	retry := manualRetry(t, e, task.ID, "Clean /tmp first.")
	require.Equal(t, "Exhausted (retry 1)", retry.Title)
	require.Equal(t, "Original.\n\nPREVIOUS ATTEMPT FAILED: out of disk\nThis is retry 1, ordered by hand after the type's 0 automatic retries.\nClean /tmp first.", retry.Description)
	e.retryReactor("a", nil)
	e.eventually("the reactors to pass the failure", func() bool {
		lags, err := e.db.ReactorLags(e.ctx)
		require.NoError(t, err)
		return len(lags) == 2 && lags[0].EventsBehind == 0 && lags[1].EventsBehind == 0
	})
	evs := e.stream(task.ID)
	require.Len(t, ofType(evs, "task.retried"), 1)
	require.True(t, ofType(evs, "task.retried")[0].Payload.(events.TaskRetried).Manual)
	require.Empty(t, ofType(evs, "task.retries_exhausted"))

	// Twice: refused.
	err := e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateRetry(e.ctx, tx, task.ID, retryParams(true, ""))
		return err
	})
	require.ErrorIs(t, err, events.ErrInvalidTransition)

	// After the reactor said exhausted: allowed by hand.
	require.NotNil(t, e.claim(w))
	e.fail(w, retry.ID, "again")
	require.Equal(t, events.RetryOutcomeExhausted, *e.decided(retry.ID).RetryOutcome)
	again := manualRetry(t, e, retry.ID, "")
	require.Equal(t, "Exhausted (retry 2)", again.Title)
	require.Equal(t, 2, again.RetryCount)
	got := e.get(retry.ID)
	require.Equal(t, events.RetryOutcomeRetried, *got.RetryOutcome)
	require.Equal(t, again.ID, *got.RetryTaskID)

	// A pending task cannot be retried.
	pending := e.createTask(tt, "Pending", "")
	err = e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateRetry(e.ctx, tx, pending.ID, retryParams(true, ""))
		return err
	})
	require.ErrorIs(t, err, events.ErrInvalidTransition)
}

// The retry reactor keeps a task's unique key on its retry; when another
// task holds the key by then, it makes no retry and records why.
func TestRetryOfAUniqueKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.taskType(events.TaskTypeSpec{Name: "keyed_crawl", MaxRetries: 3})
	w := e.worker("Crawler", 1)
	create := func(title string) *events.Task {
		t.Helper()
		task, err := e.db.CreateTask(e.ctx, e.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
			Title: title, Params: []byte(`{}`), UniqueKey: "NVDA"}}, system)
		require.NoError(t, err)
		return task
	}
	// Two failures before the reactor runs: the first task's, and that of
	// a task created after it failed, which took the key.
	first := create("first")
	require.NotNil(t, e.claim(w))
	e.fail(w, first.ID, "429")
	second := create("second")
	require.NotNil(t, e.claim(w))
	e.fail(w, second.ID, "429 again")
	taker := create("taker")

	e.retryReactor("a", nil)
	for _, id := range []string{first.ID, second.ID} {
		decided := e.decided(id)
		require.Equal(t, events.RetryOutcomeSkipped, *decided.RetryOutcome)
		skipped := ofType(e.stream(id), "task.retry_skipped")
		require.Len(t, skipped, 1)
		require.Contains(t, skipped[0].Payload.(events.TaskRetrySkipped).Reason, taker.ID)
	}

	// Once the key is free, the retry keeps it.
	_, _, err := e.db.UpdateTask(e.ctx, e.pool, taker.ID, system, func(t *events.Task) ([]events.Payload, error) { return t.Cancel("", "") })
	require.NoError(t, err)
	third := create("third")
	require.NotNil(t, e.claim(w))
	e.fail(w, third.ID, "429 once more")
	decided := e.decided(third.ID)
	require.Equal(t, events.RetryOutcomeRetried, *decided.RetryOutcome)
	require.Equal(t, "NVDA", *e.get(*decided.RetryTaskID).UniqueKey)
}
