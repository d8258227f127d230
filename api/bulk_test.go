package api_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// createTasks makes n pending tasks of tt titled prefix 0..n-1 through the
// batch route.
func (b *bundle) createTasks(t *testing.T, tt *events.TaskType, prefix string, n int, prio events.Priority) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += client.MaxCreateTasks {
		var batch []client.NewTask
		for i := start; i < min(n, start+client.MaxCreateTasks); i++ {
			batch = append(batch, client.NewTask{Title: fmt.Sprintf("%s %d", prefix, i), TaskTypeID: tt.ID,
				Priority: prio, Params: json.RawMessage(`{"days":1}`)})
		}
		out, err := b.admin.CreateTasks(b.ctx, batch)
		require.NoError(t, err)
		require.Zero(t, out.Failed)
		for _, it := range out.Items {
			ids = append(ids, it.ID)
		}
	}
	return ids
}

// cancelledBy counts the task.cancelled events whose reason is reason.
func (b *bundle) cancelledBy(t *testing.T, reason string) int {
	return b.count(t, fmt.Sprintf(`SELECT count(*) FROM task_events WHERE type = 'task.cancelled' AND data->>'reason' = '%s'`, reason))
}

// A bulk cancel reaches every task its filter matches, across requests of
// a bounded size: the dry run counts them first, each gets its own
// task.cancelled (with the reason and the admin as actor), the cursor
// carries the walk on, and tasks outside the filter or already ended are
// left alone.
func TestBulkCancelEveryMatchingTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	crawl, report := b.newType(t, "crawl"), b.newType(t, "report")
	w := b.newWorker(t, "Una", 2)
	target := b.createTasks(t, crawl, "crawl", 23, events.PriorityLow)
	high := b.createTasks(t, crawl, "urgent crawl", 4, events.PriorityHigh)
	other := b.createTasks(t, report, "report", 6, events.PriorityLow)
	// A low crawl that ended before: the filter matches it, the action not.
	done := b.createTasks(t, crawl, "done crawl", 1, events.PriorityLow)[0]
	_, err := b.admin.AssignTask(ctx, done, w.ID, "")
	require.NoError(t, err)
	got, err := w.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, done, got.ID)
	_, err = w.Complete(ctx, done)
	require.NoError(t, err)

	filter := client.TaskFilter{TaskTypeID: crawl.ID, Priority: "low"}
	dry, err := b.admin.BulkTasks(ctx, client.BulkRequest{Action: "cancel", Filter: filter, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 23, dry.Matching)
	require.False(t, dry.MatchingAtLeast)
	require.Zero(t, dry.Done)
	require.Zero(t, b.cancelledBy(t, "upstream gone"), "a dry run changes nothing")

	// 23 tasks at 10 a request: three requests, the first two with a cursor.
	req := client.BulkRequest{Action: "cancel", Filter: filter, Reason: "upstream gone", Limit: 10}
	var answers []client.BulkResult
	for {
		res, err := b.admin.BulkTasks(ctx, req)
		require.NoError(t, err)
		answers = append(answers, *res)
		if res.NextCursor == "" {
			break
		}
		req.After = res.NextCursor
	}
	require.Len(t, answers, 3)
	require.Equal(t, []int{10, 10, 3}, []int{answers[0].Done, answers[1].Done, answers[2].Done})
	for _, a := range answers {
		require.Zero(t, a.Skipped)
		require.Equal(t, a.Done, a.Matching)
	}
	require.Equal(t, 23, b.cancelledBy(t, "upstream gone"))
	require.Equal(t, 23, b.count(t, fmt.Sprintf(`SELECT count(*) FROM task_events WHERE type = 'task.cancelled'
		AND meta->'actor'->>'id' = '%s' AND meta->'actor'->>'kind' = 'admin'`, b.adminID)))
	for _, id := range target {
		require.Equal(t, events.StatusCancelled, b.requireProjectionIsFold(t, id).Status)
	}
	for _, id := range append(append(high, other...), done) {
		task, err := b.db.GetTask(ctx, b.pool, id)
		require.NoError(t, err)
		require.NotEqual(t, events.StatusCancelled, task.Status, "task %s is outside the filter or had ended", task.Title)
	}

	// Nothing left: the dry run says 0 and a run does nothing.
	dry, err = b.admin.BulkTasks(ctx, client.BulkRequest{Action: "cancel", Filter: filter, DryRun: true})
	require.NoError(t, err)
	require.Zero(t, dry.Matching)
	res, err := b.admin.BulkTasks(ctx, client.BulkRequest{Action: "cancel", Filter: filter, Reason: "again"})
	require.NoError(t, err)
	require.Equal(t, client.BulkResult{Action: "cancel", Skips: []client.BulkSkip{}}, *res)
	b.requireReplayClean(t)
}

// Bulk retry makes one retry of each failed task the filter matches, through
// the manual retry's command (task.retried on the failed task, a new task),
// with the reason as the retries' hint; a second run finds nothing to retry.
func TestBulkRetryFailedTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "crawl")
	w := b.newWorker(t, "Una", 5)
	ids := b.createTasks(t, tt, "crawl", 8, events.PriorityMedium)
	var failed []string
	for i := range 8 {
		got, err := w.Claim(ctx)
		require.NoError(t, err)
		if i%2 == 0 {
			_, err = w.Fail(ctx, got.ID, "HTTP 429")
			failed = append(failed, got.ID)
		} else {
			_, err = w.Complete(ctx, got.ID)
		}
		require.NoError(t, err)
	}
	require.Len(t, ids, 8)

	all := client.TaskFilter{TaskTypeID: tt.ID}
	dry, err := b.admin.BulkTasks(ctx, client.BulkRequest{Action: "retry", Filter: all, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 4, dry.Matching, "only the failed tasks without a retry")
	total, err := b.admin.BulkAll(ctx, client.BulkRequest{Action: "retry", Filter: all, Reason: "the rate limit was raised"}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, total.Done)
	require.Zero(t, total.Skipped)
	for _, id := range failed {
		task := b.requireProjectionIsFold(t, id)
		require.NotNil(t, task.RetryTaskID)
		retry, err := b.db.GetTask(ctx, b.pool, *task.RetryTaskID)
		require.NoError(t, err)
		require.Contains(t, retry.Description, "the rate limit was raised")
		require.Equal(t, events.StatusPending, retry.Status)
	}
	again, err := b.admin.BulkTasks(ctx, client.BulkRequest{Action: "retry", Filter: all})
	require.NoError(t, err)
	require.Zero(t, again.Done+again.Skipped)
	b.requireReplayClean(t)
}

// Concurrent bulk cancels over the same tasks race for each one: every
// request succeeds, each task is cancelled exactly once, and a task another
// request got to first is skipped and counted, never an error.
func TestBulkCancelRacesAreSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "crawl")
	const n, racers = 300, 4
	b.createTasks(t, tt, "crawl", n, events.PriorityLow)
	var mu sync.Mutex
	var done, reached int
	var g errgroup.Group
	for range racers {
		g.Go(func() error {
			res, err := b.admin.BulkAll(b.ctx, client.BulkRequest{Action: "cancel", Filter: client.TaskFilter{Status: "pending"}, Reason: "race"}, nil)
			if err != nil {
				return err
			}
			for _, s := range res.Skips {
				if s.Code != "invalid_transition" && s.Code != "conflict" {
					return fmt.Errorf("skip %+v", s)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			done += res.Done
			reached += res.Matching
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Equal(t, n, done)
	require.GreaterOrEqual(t, reached, n)
	require.Equal(t, n, b.cancelledBy(t, "race"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM (SELECT stream_id FROM task_events WHERE type = 'task.cancelled' GROUP BY stream_id HAVING count(*) > 1) x`))
	b.requireReplayClean(t)
}

// The list and the bulk action read one filter: GET /tasks with q and stuck
// and a dry run agree on what matches.
func TestBulkFilterIsTheListFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "crawl")
	b.createTasks(t, tt, "crawl NVDA", 3, events.PriorityLow)
	b.createTasks(t, tt, "crawl AMD", 2, events.PriorityLow)
	page, err := b.admin.Tasks(b.ctx, client.TaskQuery{Q: "nvda"})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 3)
	dry, err := b.admin.BulkTasks(b.ctx, client.BulkRequest{Action: "cancel", Filter: client.TaskFilter{Q: "nvda"}, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 3, dry.Matching)
	page, err = b.admin.Tasks(b.ctx, client.TaskQuery{Stuck: true})
	require.NoError(t, err)
	require.Empty(t, page.Tasks)
}
