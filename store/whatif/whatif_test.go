package whatif_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/storetest"
	"github.com/clawdbot/task-service/store/whatif"
)

// skipPermanent is the advisor: SKIP for reasons that say "permanent".
type skipPermanent struct{}

func (skipPermanent) Advise(_ context.Context, req reactors.AdviceRequest) (reactors.Advice, error) {
	if strings.Contains(req.Reason, "permanent") {
		return reactors.Advice{Skip: true, Reason: "the input is wrong"}, nil
	}
	return reactors.Advice{Hint: "look again"}, nil
}

// history is a known log made by the real write path and the real retry
// reactor: each chain's fate is chosen, the reactor decides.
type history struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	db     *store.DB
	worker string
}

func newHistory(t *testing.T) *history { return newHistoryAt(t, nil) }

// newHistoryAt writes the history with the store's clock now (nil: the
// real one).
func newHistoryAt(t *testing.T, now func() time.Time) *history {
	t.Helper()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	hub := store.NewHub()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, AfterCommit: hub.Wake, Now: now})
	require.NoError(t, err)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	retry, err := reactors.NewRetry(reactors.RetryConfig{DB: db, Advisor: skipPermanent{}, InstanceID: "test", Logger: log})
	require.NoError(t, err)
	runner, err := reactors.NewRunner(reactors.RunnerConfig{DB: db, Hub: hub, InstanceID: "test", Reactors: retry.Reactors(),
		CatchUp: 200 * time.Millisecond, Logger: log})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = runner.Run(rctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	u, err := db.CreateUser(ctx, events.UserRegistered{Email: "w@workers.example.com", FullName: "W", IsWorker: true,
		MaxConcurrentTasks: 1}, "worker-password", "x", events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	return &history{t: t, ctx: ctx, pool: pool, db: db, worker: u.ID}
}

var admin = events.Meta{Actor: events.System("test")}

func (h *history) taskType(name string, maxRetries int) *events.TaskType {
	tt, err := h.db.CreateTaskType(h.ctx, events.TaskTypeSpec{Name: name, SOP: "Do it.", MaxRetries: maxRetries}, admin)
	require.NoError(h.t, err)
	return tt
}

// chain creates a task and plays fates on it and its retries, one per
// attempt: "ok", "cancel", or a failure "error:<reason>", "offline",
// "timeout", each failure waiting for the reactor's decision.
func (h *history) chain(tt *events.TaskType, fates ...string) string {
	h.t.Helper()
	t, err := h.db.CreateTask(h.ctx, h.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
		Title: "t", Params: []byte(`{}`), Priority: events.PriorityHigh}}, admin)
	require.NoError(h.t, err)
	root, id := t.ID, t.ID
	wm := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: h.worker}}
	for _, fate := range fates {
		if fate == "cancel" {
			_, _, err := h.db.UpdateTask(h.ctx, h.pool, id, admin, func(t *events.Task) ([]events.Payload, error) { return t.Cancel("test", "") })
			require.NoError(h.t, err)
			return root
		}
		claimed, err := h.db.Claim(h.ctx, h.worker, wm)
		require.NoError(h.t, err)
		require.Equal(h.t, id, claimed.ID)
		switch kind, reason, _ := strings.Cut(fate, ":"); kind {
		case "ok":
			_, _, err := h.db.CompleteTask(h.ctx, id, h.worker, wm)
			require.NoError(h.t, err)
			return root
		case "error":
			_, _, err := h.db.UpdateTask(h.ctx, h.pool, id, wm, func(t *events.Task) ([]events.Payload, error) {
				return t.Fail(h.worker, events.FailureError, reason, nil)
			})
			require.NoError(h.t, err)
		default:
			evidence := `{"started_at": "` + claimed.StartedAt.Format(time.RFC3339Nano) + `", "offline_threshold_seconds": 600, "stuck_threshold_seconds": 900}`
			did, err := h.db.FailInProgress(h.ctx, id, store.SystemFailure{StartedAt: *claimed.StartedAt, Kind: map[string]string{
				"offline": events.FailureWorkerOffline, "timeout": events.FailureTimeout}[kind], Reason: "system", Evidence: json.RawMessage(evidence)}, admin)
			require.NoError(h.t, err)
			require.True(h.t, did)
		}
		next := h.decided(id)
		if next == "" {
			return root
		}
		id = next
	}
	return root
}

// decided waits for the reactor's decision on id: its retry's id, or "".
func (h *history) decided(id string) string {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var outcome, retry *string
		err := h.pool.QueryRow(h.ctx, `SELECT retry_outcome, (SELECT id::text FROM worker_tasks r WHERE r.parent_task_id = t.id)
			FROM worker_tasks t WHERE id = $1`, id).Scan(&outcome, &retry)
		require.NoError(h.t, err)
		if outcome != nil && (*outcome != "retried" || retry != nil) {
			if retry == nil {
				return ""
			}
			return *retry
		}
		require.False(h.t, time.Now().After(deadline), "the retry reactor did not decide on %s", id)
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *history) whatIf(policy string) *whatif.Report {
	h.t.Helper()
	p, err := whatif.ParsePolicy([]byte(policy))
	require.NoError(h.t, err)
	rep, err := whatif.Run(h.ctx, h.pool, whatif.Config{Policy: p, Since: 24 * time.Hour, SampleSize: 100})
	require.NoError(h.t, err)
	return rep
}

func sorted(ids []string) []string {
	sort.Strings(ids)
	return ids
}

func sampleRoots(rep *whatif.Report) []string {
	var ids []string
	for _, c := range rep.Sample {
		ids = append(ids, c.RootTaskID)
	}
	sort.Strings(ids)
	return ids
}

// exhaustedRoots reads from the projections, not the log, the roots of
// the chains whose last task failed with a retriable kind and exhausted
// its retries.
func exhaustedRoots(t *testing.T, pool *pgxpool.Pool) []string {
	rows, err := pool.Query(context.Background(), `WITH RECURSIVE up AS (
		    SELECT id, parent_task_id FROM worker_tasks
		     WHERE status = 'failed' AND retry_outcome = 'exhausted' AND failure_kind IN ('error', 'worker_offline', 'timeout')
		    UNION ALL
		    SELECT w.id, w.parent_task_id FROM worker_tasks w JOIN up ON w.id = up.parent_task_id)
		SELECT id::text FROM up WHERE parent_task_id IS NULL ORDER BY 1`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func TestWhatIfKnownHistory(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	crawl, build := h.taskType("crawl", 1), h.taskType("build", 2)
	retriedThenDone := h.chain(crawl, "error:tests failed", "ok")
	crawlExhausted := h.chain(crawl, "error:tests failed", "error:tests failed")
	h.chain(crawl, "error:permanent: bad input")
	offlineExhausted := h.chain(crawl, "offline", "timeout")
	buildExhausted := h.chain(build, "error:flaky", "offline", "error:flaky")
	h.chain(build, "ok")
	h.chain(build, "cancel")
	h.chain(build, "error:flaky", "ok")

	want := []string{crawlExhausted, offlineExhausted, buildExhausted}
	sort.Strings(want)
	require.Equal(t, want, exhaustedRoots(t, h.pool), "the history has the chains it was built with")

	t.Run("one more retry reports exactly the exhausted chains", func(t *testing.T) {
		rep := h.whatIf(`{"types": {"crawl": {"max_retries": 2}, "build": {"max_retries": 3}}}`)
		require.Equal(t, int64(8), rep.Totals.Chains)
		require.Equal(t, want, sampleRoots(rep))
		require.Equal(t, int64(3), rep.Totals.Changed)
		require.Equal(t, int64(3), rep.Totals.Retried)
		require.Equal(t, int64(3), rep.Totals.OutcomeUnknown)
		require.Zero(t, rep.Totals.NotRetried+rep.Totals.Skipped+rep.Totals.NotSkipped+rep.Totals.FailedByDetector+rep.Totals.NotFailedByDetector)
		require.Equal(t, map[string]int64{"exhausted": 3, "completed": 3, "skipped": 1, "cancelled": 1}, rep.Totals.Recorded)
		require.Equal(t, map[string]int64{"unknown": 3, "completed": 3, "skipped": 1, "cancelled": 1}, rep.Totals.Simulated)
		require.Len(t, rep.Types, 2)
		require.Equal(t, "build", rep.Types[0].Type)
		require.Equal(t, int64(1), rep.Types[0].Changed)
		require.Equal(t, int64(2), rep.Types[1].Changed)
	})

	t.Run("the current policy changes nothing", func(t *testing.T) {
		rep := h.whatIf(`{"worker_offline_after": "10m", "types": {"crawl": {"max_retries": 1, "retry_backoff_seconds": 0, "skip_advised": true},
			"build": {"max_retries": 2, "skip_reasons": []}}}`)
		require.Equal(t, int64(8), rep.Totals.Chains)
		require.Zero(t, rep.Totals.Changed, "%+v", rep.Sample)
		require.Empty(t, rep.Sample)
		require.Equal(t, rep.Totals.Recorded, rep.Totals.Simulated)
		require.Equal(t, int64(8), rep.Totals.TimeCompared)
	})

	t.Run("skip rules end chains at a permanent failure", func(t *testing.T) {
		rep := h.whatIf(`{"types": {"crawl": {"skip_reasons": ["^tests failed$"], "skip_advised": false}}}`)
		require.Equal(t, int64(2), rep.Totals.Skipped, "%+v", rep.Sample)
		require.Equal(t, int64(1), rep.Totals.NotSkipped, "the advised skip is retried")
		byRoot := map[string]whatif.ChangedChain{}
		for _, c := range rep.Sample {
			byRoot[c.RootTaskID] = c
		}
		require.Equal(t, "skipped", byRoot[retriedThenDone].Simulated)
		require.Contains(t, byRoot[retriedThenDone].Changes, "not_retried")
		require.Equal(t, "skipped", byRoot[crawlExhausted].Simulated)
	})

	t.Run("a longer offline threshold fails the detector's attempts later", func(t *testing.T) {
		// The evidence has no heartbeat (silent since the claim) and a 15 min
		// stuck threshold: the rule's time moves from claim+15m to claim+30m.
		rep := h.whatIf(`{"worker_offline_after": "30m"}`)
		require.Equal(t, int64(2), rep.Totals.Changed, "%+v", rep.Sample)
		require.Equal(t, int64(2), rep.Totals.Later)
		require.Equal(t, int64(2), rep.Totals.TimeCompared-6)
		require.InDelta(t, 2*15*60/8.0, rep.Totals.MeanTimeChangeSeconds, 0.001)
		require.Equal(t, sorted([]string{buildExhausted, offlineExhausted}), sampleRoots(rep))
		require.Zero(t, rep.Totals.NotFailedByDetector+rep.Totals.OutcomeUnknown)
	})

	t.Run("nothing is written", func(t *testing.T) {
		var before, after int64
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM task_events`).Scan(&before))
		h.whatIf(`{"types": {"crawl": {"max_retries": 5}}}`)
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM task_events`).Scan(&after))
		require.Equal(t, before, after)
	})

	t.Run("a type the database does not have is refused by name", func(t *testing.T) {
		p, err := whatif.ParsePolicy([]byte(`{"types": {"crawler": {"max_retries": 2}}}`))
		require.NoError(t, err)
		_, err = whatif.Run(h.ctx, h.pool, whatif.Config{Policy: p, Since: time.Hour})
		var v *events.ValidationError
		require.True(t, errors.As(err, &v), "%v", err)
		require.Equal(t, "types.crawler", v.Field)
	})
}

func TestParsePolicyRefusesBadFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, field string }{
		{`{"types": {"crawl": {"max_retries": 2}}`, "policy"},
		{`not json`, "policy"},
		{`[]`, "policy"},
		{`null`, "policy"},
		{`{"max_retries": 2}`, "max_retries"},
		{`{"types": {"crawl": {"max_retries": -1}}}`, "types.crawl.max_retries"},
		{`{"types": {"crawl": {"max_retries": "3"}}}`, "types.crawl.max_retries"},
		{`{"types": {"crawl": {"max_retry": 3}}}`, "types.crawl.max_retry"},
		{`{"types": {"crawl": {"retry_backoff_seconds": -5}}}`, "types.crawl.retry_backoff_seconds"},
		{`{"types": {"crawl": {"skip_reasons": ["("]}}}`, "types.crawl.skip_reasons[0]"},
		{`{"types": {"crawl": null}}`, "types.crawl"},
		{`{"worker_offline_after": "0s"}`, "worker_offline_after"},
		{`{"worker_offline_after": "-1m"}`, "worker_offline_after"},
		{`{"worker_offline_after": "soon"}`, "worker_offline_after"},
		{`{"worker_offline_after": 600}`, "worker_offline_after"},
		{`{"types": {"crawl": {}}} {}`, "policy"},
		{`{"x": "` + strings.Repeat("a", whatif.MaxPolicyChars) + `"}`, "policy"},
	} {
		_, err := whatif.ParsePolicy([]byte(tc.raw))
		var v *events.ValidationError
		require.True(t, errors.As(err, &v), "%.60s: %v", tc.raw, err)
		require.Equal(t, tc.field, v.Field, "%.60s: %v", tc.raw, err)
	}
	for _, s := range []string{"0d", "367d", "-1h", "", "1y", "30"} {
		_, err := whatif.ParseSince(s)
		require.Error(t, err, s)
	}
	d, err := whatif.ParseSince("30d")
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, d)
	_ = fmt.Sprint
}

// Memory follows the chains held open, so a window that holds more open at
// once than the cap is refused; chains that ended no longer count.
func TestWhatIfBoundsOpenChains(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	tt := h.taskType("crawl", 0)
	for range 3 {
		h.chain(tt, "ok")
	}
	for range 2 {
		h.chain(tt) // pending: open to the end of the window
	}
	run := func(max int) (*whatif.Report, error) {
		return whatif.Run(h.ctx, h.pool, whatif.Config{Since: time.Hour, MaxOpenChains: max})
	}
	rep, err := run(2)
	require.NoError(t, err)
	require.EqualValues(t, 5, rep.Totals.Chains)
	_, err = run(1)
	var open *whatif.OpenChainsError
	require.ErrorAs(t, err, &open)
	require.Equal(t, 1, open.Max)
	require.Contains(t, err.Error(), "more than 1 retry chains open at once")
}

// The known history written three days ago, compacted past a one-day
// retention (its periods archived first), answers every what-if as its
// events did: the chains are rebuilt from their task.compacted summaries
// (each claim, the failure with its reason and the detector's evidence,
// each retry decision). A compaction written before the summaries kept the
// decisions and the evidence leaves the chains a policy would decide on
// them unjudged, and says how many.
func TestWhatIfOverCompactedChains(t *testing.T) {
	t.Parallel()
	back := 72 * time.Hour
	h := newHistoryAt(t, func() time.Time { return time.Now().Add(-back) })
	crawl, build := h.taskType("crawl", 1), h.taskType("build", 2)
	h.chain(crawl, "error:tests failed", "ok")
	crawlExhausted := h.chain(crawl, "error:tests failed", "error:tests failed")
	h.chain(crawl, "error:permanent: bad input")
	offlineExhausted := h.chain(crawl, "offline", "timeout")
	buildExhausted := h.chain(build, "error:flaky", "offline", "error:flaky")
	h.chain(build, "ok")
	h.chain(build, "cancel")
	h.chain(build, "error:flaky", "ok")
	// An admin's retry after the reactor exhausted the chain starts a
	// chain of its own, which completes.
	var last string
	require.NoError(t, h.pool.QueryRow(h.ctx, `WITH RECURSIVE c AS (SELECT id, retry_task_id FROM worker_tasks WHERE id = $1
		UNION ALL SELECT w.id, w.retry_task_id FROM worker_tasks w JOIN c ON w.id = c.retry_task_id)
		SELECT id::text FROM c WHERE retry_task_id IS NULL`, crawlExhausted).Scan(&last))
	manual, err := h.db.CreateRetry(h.ctx, h.pool, last, store.RetryParams{Manual: true, Meta: admin})
	require.NoError(t, err)
	wm := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: h.worker}}
	_, err = h.db.Claim(h.ctx, h.worker, wm)
	require.NoError(t, err)
	_, _, err = h.db.CompleteTask(h.ctx, manual.ID, h.worker, wm)
	require.NoError(t, err)
	open := h.chain(crawl) // pending: never compacted

	policies := []string{
		`{"types": {"crawl": {"max_retries": 2}, "build": {"max_retries": 3}}}`,
		`{"types": {"crawl": {"skip_reasons": ["^tests failed$"], "skip_advised": false}}}`,
		`{"worker_offline_after": "30m"}`,
		`{"worker_offline_after": "5m", "types": {"build": {"retry_backoff_seconds": 30, "max_retries": 0}}}`,
		`{}`,
	}
	whatIf := func(policy string) *whatif.Report {
		p, err := whatif.ParsePolicy([]byte(policy))
		require.NoError(t, err)
		rep, err := whatif.Run(h.ctx, h.pool, whatif.Config{Policy: p, Since: 7 * 24 * time.Hour, SampleSize: 100})
		require.NoError(t, err)
		return rep
	}
	before := make([]*whatif.Report, len(policies))
	for i, p := range policies {
		before[i] = whatIf(p)
	}
	require.Equal(t, int64(10), before[0].Totals.Chains)
	require.Equal(t, sorted([]string{crawlExhausted, offlineExhausted, buildExhausted}), sampleRoots(before[0]))

	// Archive the old days, then compact past a day's retention.
	bs, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	_, err = archive.Run(h.ctx, archive.Config{Pool: h.pool, Store: bs, Kind: archive.Day})
	require.NoError(t, err)
	now, err := store.New(h.pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	crep, err := now.Compact(h.ctx, store.CompactConfig{Retention: 24 * time.Hour, Period: archive.Day})
	require.NoError(t, err)
	require.Equal(t, int64(8), crep.Chains, "%+v", crep) // the manual retry is compacted with the chain it retried
	var live int
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM task_events WHERE stream_type = 'task' AND type <> 'task.compacted'
		AND stream_id <> $1`, open).Scan(&live))
	require.Zero(t, live, "every finished task's events are compacted")

	for i, p := range policies {
		after := whatIf(p)
		require.Equal(t, crep.Tasks, after.CompactedTasks, p)
		require.Zero(t, after.Totals.NotJudged, p)
		require.Equal(t, before[i].Totals, after.Totals, p)
		require.Equal(t, before[i].Types, after.Types, p)
		require.Equal(t, before[i].Sample, after.Sample, p)
		require.Equal(t, before[i].Events, after.Events, p)
		require.Equal(t, before[i].Partial, after.Partial, p)
	}

	// As a compaction written before the decisions and the evidence were
	// kept: a retry could have been an admin's after the reactor ended the
	// chain (the manual retry's chain is then in the one it retried), so
	// every chain with a retry is unjudged; a skip cannot be re-decided
	// under its type's policy, nor a detector failure re-timed; the rest
	// are judged as before.
	_, err = h.pool.Exec(h.ctx, `UPDATE task_events SET data = data - 'decisions' - 'evidence' WHERE type = 'task.compacted'`)
	require.NoError(t, err)
	// Retried: crawl's retried-then-done, exhausted (with the manual retry)
	// and offline-then-timeout, build's flaky-offline-flaky and flaky-then-ok.
	for i, want := range []struct{ judged, unjudged int64 }{
		{3, 6}, // and crawl's advised skip; judged: build's ok and cancel, the open chain
		{3, 6}, // the same
		{4, 5}, // judged: crawl's skip too (no type policy re-decides it)
		{4, 5}, // the same (build's policy; crawl's skip stands)
		{4, 5},
	} {
		rep := whatIf(policies[i])
		require.Equal(t, want.unjudged, rep.Totals.NotJudged, policies[i])
		require.Equal(t, want.judged, rep.Totals.Chains, policies[i])
		require.Zero(t, rep.Totals.Changed, "%s: the chains that changed are the unjudged ones: %+v", policies[i], rep.Sample)
	}
}
