package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type claimResult struct {
	task *store.TaskWithType
	err  error
	took time.Duration
}

func claimAsync(ctx context.Context, w *worker, wait time.Duration) <-chan claimResult {
	out := make(chan claimResult, 1)
	go func() {
		start := time.Now()
		task, err := w.ClaimWait(ctx, wait)
		out <- claimResult{task, err, time.Since(start)}
	}()
	return out
}

// waiters waits until n claims are waiting on the server (its gauge).
func waiters(t *testing.T, b *bundle, n int) {
	t.Helper()
	want := fmt.Sprintf("taskservice_claim_waiters %d\n", n)
	require.Eventually(t, func() bool {
		resp, err := b.http.Get(b.url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && strings.Contains(string(body), want)
	}, 30*time.Second, 5*time.Millisecond)
}

func TestLongPollClaim(t *testing.T) {
	t.Parallel()
	b := setupHub(t)
	tt := b.newType(t, "report")
	w := b.newWorker(t, "Poller", 1)

	// A task created while the worker waits is handed to it.
	got := claimAsync(b.ctx, w, 30*time.Second)
	waiters(t, b, 1)
	task := b.newTask(t, tt, "Arrives later", events.PriorityMedium, "")
	r := <-got
	require.NoError(t, r.err)
	require.NotNil(t, r.task)
	require.Equal(t, task.ID, r.task.ID)
	require.Equal(t, events.StatusInProgress, r.task.Status)
	require.Equal(t, tt.ID, r.task.TaskType.ID)
	_, err := w.Complete(b.ctx, task.ID)
	require.NoError(t, err)

	// A claimable task is returned at once, wait or not.
	now := b.newTask(t, tt, "Already there", events.PriorityMedium, "")
	r = <-claimAsync(b.ctx, w, 30*time.Second)
	require.NoError(t, r.err)
	require.Equal(t, now.ID, r.task.ID)
	_, err = w.Complete(b.ctx, now.ID)
	require.NoError(t, err)

	// Nothing comes: null when the wait ends.
	r = <-claimAsync(b.ctx, w, time.Second)
	require.NoError(t, r.err)
	require.Nil(t, r.task)
	require.GreaterOrEqual(t, r.took, time.Second)

	// A worker at capacity waits until it has room again.
	held := b.newTask(t, tt, "Held", events.PriorityMedium, "")
	c, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Equal(t, held.ID, c.ID)
	next := b.newTask(t, tt, "Next", events.PriorityMedium, "")
	got = claimAsync(b.ctx, w, 30*time.Second)
	waiters(t, b, 1)
	_, err = w.Complete(b.ctx, held.ID)
	require.NoError(t, err)
	r = <-got
	require.NoError(t, r.err)
	require.Equal(t, next.ID, r.task.ID)
}

func TestLongPollClaimValidation(t *testing.T) {
	t.Parallel()
	b := setupHub(t)
	w := b.newWorker(t, "Poller", 1)
	// Empty is refused too: the document says a whole number, and a client
	// that means no waiting leaves the parameter out or sends 0.
	for _, wait := range []string{"-1", "61", "abc", "1.5", "1e3", "%20", ""} {
		err := w.Do(b.ctx, http.MethodPost, "/api/v1/worker/tasks/claim?wait="+wait, nil, nil)
		var apiErr *client.Error
		require.True(t, errors.As(err, &apiErr), "wait=%s: %v", wait, err)
		require.Equal(t, http.StatusBadRequest, apiErr.Status, wait)
		require.Equal(t, "wait", apiErr.Field, wait)
	}
	for _, path := range []string{"/api/v1/worker/tasks/claim?wait=0", "/api/v1/worker/tasks/claim"} { // no waiting: null at once
		var out any
		require.NoError(t, w.Do(b.ctx, http.MethodPost, path, nil, &out), path)
		require.Nil(t, out)
	}
}

// Shutdown answers waiting claimers at once with null, and later claims do
// not wait.
func TestLongPollDrain(t *testing.T) {
	t.Parallel()
	b := setupHub(t)
	w1 := b.newWorker(t, "PollerOne", 1)
	w2 := b.newWorker(t, "PollerTwo", 1)
	a, c := claimAsync(b.ctx, w1, 60*time.Second), claimAsync(b.ctx, w2, 60*time.Second)
	waiters(t, b, 2)
	b.srv.Drain()
	for _, ch := range []<-chan claimResult{a, c} {
		r := <-ch
		require.NoError(t, r.err)
		require.Nil(t, r.task)
		require.Less(t, r.took, 50*time.Second)
	}
	r := <-claimAsync(b.ctx, w1, 60*time.Second)
	require.NoError(t, r.err)
	require.Nil(t, r.task)
	require.Less(t, r.took, 50*time.Second)
}

func TestManualRetryRoute(t *testing.T) {
	t.Parallel()
	b := setupHub(t)
	tt := b.newType(t, "report")
	w := b.newWorker(t, "Worker", 1)
	task := b.newTask(t, tt, "Report", events.PriorityHigh, "")
	_, err := w.Claim(b.ctx)
	require.NoError(t, err)

	_, err = b.admin.RetryTask(b.ctx, task.ID, "")
	require.True(t, client.IsStatus(err, http.StatusConflict), "in progress: %v", err)

	_, err = w.Fail(b.ctx, task.ID, "disk full")
	require.NoError(t, err)
	retry, err := b.admin.RetryTask(b.ctx, task.ID, "Free some space first.")
	require.NoError(t, err)
	require.Equal(t, "Report (retry 1)", retry.Title)
	require.Equal(t, 1, retry.RetryCount)
	require.Equal(t, task.ID, *retry.ParentTaskID)
	require.Equal(t, "PREVIOUS ATTEMPT FAILED: disk full\nThis is retry 1 of 2. An admin ordered it by hand.\nFree some space first.", retry.Description)

	detail, err := b.admin.Task(b.ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, events.RetryOutcomeRetried, *detail.RetryOutcome)
	require.Equal(t, retry.ID, *detail.RetryTaskID)

	_, err = b.admin.RetryTask(b.ctx, task.ID, "")
	require.True(t, client.IsStatus(err, http.StatusConflict), "twice: %v", err)
	_, err = b.admin.RetryTask(b.ctx, "00000000-0000-0000-0000-000000000000", "")
	require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
	_, err = b.admin.RetryTask(b.ctx, "not-a-uuid", "")
	require.True(t, client.IsStatus(err, http.StatusBadRequest), "%v", err)
	err = b.admin.Do(b.ctx, http.MethodPost, "/api/v1/admin/workers/tasks/"+retry.ID+"/retry", map[string]any{"hint": 3}, nil)
	require.True(t, client.IsStatus(err, http.StatusBadRequest), "%v", err)
	_, err = w.RetryTask(b.ctx, task.ID, "")
	require.True(t, client.IsStatus(err, http.StatusForbidden), "workers may not: %v", err)
}

// claimCount reads how many claim statements the server ran (its metric).
func claimCount(t *testing.T, b *bundle) int {
	t.Helper()
	resp, err := b.http.Get(b.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "taskservice_claim_duration_seconds_count "); ok {
			var n int
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no taskservice_claim_duration_seconds_count in /metrics")
	return 0
}

// A new task is claimed by the waiter it is for, not raced for by every
// waiting claim (the claim gate, ADR 016): a task assigned to the last of
// five waiters goes to it, a pool task to the longest waiting, and each
// costs one claim.
func TestLongPollWakesOnlyWhomATaskIsFor(t *testing.T) {
	t.Parallel()
	// No safety re-check during the test: every claim counted is one a wake
	// caused, whatever the machine's load.
	b := setupWith(t, store.NewHub(), func(c *api.Config) { c.ClaimRecheck = time.Hour })
	tt := b.newType(t, "report")
	var ws []*worker
	for i := range 5 {
		ws = append(ws, b.newWorker(t, fmt.Sprintf("Gate%d", i), 1))
	}
	base := claimCount(t, b)
	var polls []<-chan claimResult
	for i, w := range ws {
		wait := 60 * time.Second // the most a claim may wait: set-up alone took 30 s under a load of 20
		if i > 0 && i < 4 {
			wait = 5 * time.Second // nothing is for them
		}
		polls = append(polls, claimAsync(b.ctx, w, wait))
		waiters(t, b, i+1)
	}
	require.Eventually(t, func() bool { return claimCount(t, b) == base+5 }, 10*time.Second, 5*time.Millisecond,
		"each waiter's first attempt")
	base += 5

	mine := b.newTask(t, tt, "For the last", events.PriorityMedium, ws[4].ID)
	r := <-polls[4]
	require.NoError(t, r.err)
	require.NotNil(t, r.task, "the last waiter's wait ran out")
	require.Equal(t, mine.ID, r.task.ID)
	pool := b.newTask(t, tt, "For whoever waited longest", events.PriorityMedium, "")
	// The gate gives the pool task's turn to the longest waiting: the first.
	type result struct {
		i int
		r claimResult
	}
	results := make(chan result, 4)
	for i, p := range polls[:4] {
		go func() { results <- result{i, <-p} }()
	}
	ended := map[int]claimResult{}
	x := <-results
	ended[x.i] = x.r
	require.Equal(t, 0, x.i, "the longest waiting gets the pool task")
	require.NoError(t, x.r.err)
	require.NotNil(t, x.r.task, "the first waiter's wait ran out and nobody got the pool task")
	require.Equal(t, pool.ID, x.r.task.ID)
	// Four commits woke the waiters: two creates, two claims. Before the
	// gate each wake made every waiter claim: 10 claims here (some wakes
	// coalesced); now only the one a task is for, and rarely a turn that
	// comes too late (the task went before its claim ran).
	claims := claimCount(t, b) - base
	t.Logf("%d claims after the first attempts", claims)
	require.LessOrEqual(t, claims, 3, "one claim a task (and rarely a turn that comes too late)")

	for len(ended) < 4 {
		x := <-results
		ended[x.i] = x.r
	}
	for i := 1; i < 4; i++ {
		require.NoError(t, ended[i].err)
		require.Nil(t, ended[i].task, "nothing was for them: their wait ran out")
	}
	// The gate's counters: looks that found a task, and the turns it gave
	// (one look may serve both tasks when their wakes coalesce).
	require.GreaterOrEqual(t, metricSum(t, b.reg, "taskservice_claim_gate_looks_total", "outcome", "some"), 1.0)
	require.GreaterOrEqual(t, metricSum(t, b.reg, "taskservice_claim_gate_turns_total"), 1.0)
	require.Zero(t, metricSum(t, b.reg, "taskservice_claim_gate_looks_total", "outcome", "error"))
}

// A long-poll that joins while nothing is claimable for anyone (the gate's
// last look found nothing, and only claims and completions came since)
// makes no claim first: the gate looks for it, and it claims when a task
// comes for it.
func TestLongPollJoiningAnEmptyGateClaimsOnlyForATask(t *testing.T) {
	t.Parallel()
	b := setupWith(t, store.NewHub(), func(c *api.Config) { c.ClaimRecheck = time.Hour })
	tt := b.newType(t, "report")
	first, second, away := b.newWorker(t, "Empty1", 1), b.newWorker(t, "Empty2", 1), b.newWorker(t, "Away", 1)
	base := claimCount(t, b)
	p1 := claimAsync(b.ctx, first, 60*time.Second)
	waiters(t, b, 1)
	require.Eventually(t, func() bool { return claimCount(t, b) == base+1 }, 10*time.Second, 5*time.Millisecond,
		"the first waiter claims: the gate has not looked yet")
	none := func() float64 { return metricSum(t, b.reg, "taskservice_claim_gate_looks_total", "outcome", "none") }
	// A task for a worker that is not waiting: the look finds nothing for
	// the waiters, so the gate is empty.
	b.newTask(t, tt, "For the absent", events.PriorityMedium, away.ID)
	require.Eventually(t, func() bool { return none() == 1 }, 10*time.Second, 5*time.Millisecond)

	p2 := claimAsync(b.ctx, second, 60*time.Second)
	waiters(t, b, 2)
	require.Eventually(t, func() bool { return none() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the gate looks for the second waiter")
	require.Equal(t, base+1, claimCount(t, b), "instead of its claim")

	mine := b.newTask(t, tt, "For the second", events.PriorityMedium, second.ID)
	r := <-p2
	require.NoError(t, r.err)
	require.NotNil(t, r.task, "the second waiter's wait ran out")
	require.Equal(t, mine.ID, r.task.ID)
	require.Equal(t, base+2, claimCount(t, b), "one claim, for its task")

	pool := b.newTask(t, tt, "For the first", events.PriorityMedium, "")
	r = <-p1
	require.NoError(t, r.err)
	require.NotNil(t, r.task)
	require.Equal(t, pool.ID, r.task.ID)
}
