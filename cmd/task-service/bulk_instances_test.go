package main_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/clawdbot/task-service/api/client"
)

// Of 1,200 tasks, 1,000 match a filter. A dry run counts them; then two
// bulk cancels of that filter, each through another instance and each in
// requests of 300, race over them. Exactly 1,000 task.cancelled events
// come out, one per matching task, whatever request got there first; the
// other 200 tasks are untouched, and replay --verify is clean.
func TestBulkCancelAThousandOfTwelveHundred(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	crawl, report := c.reportType("crawl"), c.reportType("report")
	create := func(typeID string, n int) {
		items := make([]json.RawMessage, n)
		for i := range items {
			items[i] = json.RawMessage(fmt.Sprintf(`{"title":"task %d","task_type_id":%q,"params":{"n":%d}}`, i, typeID, i))
		}
		out, err := c.admin.CreateTasksRaw(c.ctx, items)
		require.NoError(t, err)
		require.Equal(t, n, out.Created)
	}
	create(crawl.ID, 1000)
	create(report.ID, 200)

	filter := client.TaskFilter{TaskTypeID: crawl.ID, Status: "pending"}
	dry, err := c.adminOn(1).BulkTasks(c.ctx, client.BulkRequest{Action: "cancel", Filter: filter, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1000, dry.Matching)
	require.Zero(t, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.cancelled'`), "a dry run changes nothing")

	totals := make([]*client.BulkResult, 2)
	var g errgroup.Group
	for i := range totals {
		g.Go(func() error {
			var err error
			totals[i], err = c.adminOn(i).BulkAll(c.ctx, client.BulkRequest{Action: "cancel", Filter: filter, Reason: "crawler retired", Limit: 300}, nil)
			return err
		})
	}
	require.NoError(t, g.Wait())
	require.Equal(t, 1000, totals[0].Done+totals[1].Done)
	t.Logf("instance 0 cancelled %d (skipped %d), instance 1 cancelled %d (skipped %d)",
		totals[0].Done, totals[0].Skipped, totals[1].Done, totals[1].Skipped)

	require.Equal(t, 1000, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.cancelled' AND data->>'reason' = 'crawler retired'`))
	require.Equal(t, 1000, c.count(`SELECT count(DISTINCT stream_id) FROM task_events WHERE type = 'task.cancelled'`))
	require.Equal(t, 1000, c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status = 'cancelled'`, crawl.ID))
	require.Equal(t, 200, c.count(`SELECT count(*) FROM worker_tasks WHERE task_type_id = $1 AND status = 'pending' AND version = 1`, report.ID),
		"the 200 outside the filter are untouched")
	require.Zero(t, c.count(`SELECT count(*) FROM task_events e JOIN worker_tasks t ON t.id = e.stream_id
		WHERE t.task_type_id = $1 AND e.type <> 'task.created'`, report.ID))
	c.requireReplayClean()
}
