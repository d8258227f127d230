package main_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
)

// adminOn is an admin client of instance i, with the cluster's token.
func (c *cluster) adminOn(i int) *client.Client {
	cl := client.New(c.ins[i%len(c.ins)].base, c.hc)
	cl.SetToken(c.admin.Token())
	return cl
}

// requireReplayClean runs replay --verify's check on the cluster's database.
func (c *cluster) requireReplayClean() {
	c.t.Helper()
	rep, err := replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(c.t, err)
	require.True(c.t, rep.Clean(), "replay --verify: %+v", rep.Differences)
}

// reportType creates a task type whose params need a number n.
func (c *cluster) reportType(name string) *events.TaskType {
	c.t.Helper()
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: name,
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)})
	require.NoError(c.t, err)
	return tt
}

// 100 concurrent creations with one unique key, spread over three
// instances, make exactly one task: every other answer is 409
// duplicate_task naming it, or (on_duplicate existing) 200 and it.
func TestInstancesCreateOnceByUniqueKey(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	tt := c.reportType("crawl")
	const n = 100
	var wg sync.WaitGroup
	type answer struct {
		id      string
		created bool
		err     error
	}
	answers := make([]answer, n)
	for i := range n {
		wg.Go(func() {
			nt := client.NewTask{Title: "crawl NVDA", TaskTypeID: tt.ID, Params: json.RawMessage(`{"n":1}`),
				UniqueKey: "crawl:NVDA", UniqueFor: "1h"}
			if i%2 == 1 {
				nt.OnDuplicate = "existing"
			}
			task, created, err := c.adminOn(i).CreateTaskOnce(c.ctx, nt)
			a := answer{created: created, err: err}
			if task != nil {
				a.id = task.ID
			}
			answers[i] = a
		})
	}
	wg.Wait()

	var winner string
	for _, a := range answers {
		if a.created {
			require.Empty(t, winner, "two creations made a task")
			winner = a.id
		}
	}
	require.NotEmpty(t, winner)
	for i, a := range answers {
		switch {
		case a.created:
		case i%2 == 1:
			require.NoError(t, a.err)
			require.Equal(t, winner, a.id)
		default:
			var apiErr *client.Error
			require.ErrorAs(t, a.err, &apiErr)
			require.Equal(t, "duplicate_task", apiErr.Code)
			require.Equal(t, winner, apiErr.Details["existing_task_id"])
		}
	}
	require.Equal(t, 1, c.count(`SELECT count(*) FROM worker_tasks WHERE unique_key = 'crawl:NVDA'`))
	require.Equal(t, 1, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.created'`))
	c.requireReplayClean()
}

// 100 concurrent creations with one Idempotency-Key, spread over three
// instances, make exactly one task with one task.created, and every answer
// is that task's 201.
func TestInstancesCreateOnceByIdempotencyKey(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	tt := c.reportType("crawl")
	const n = 100
	ctx := client.WithIdempotencyKey(c.ctx, "retry-me-7f3a")
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			task, created, err := c.adminOn(i).CreateTaskOnce(ctx, client.NewTask{Title: "crawl AMD", TaskTypeID: tt.ID, Params: json.RawMessage(`{"n":2}`)})
			if err == nil && !created {
				err = fmt.Errorf("answered %s as not created", task.ID)
			}
			if task != nil {
				ids[i] = task.ID
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, 1, c.count(`SELECT count(*) FROM worker_tasks`))
	require.Equal(t, 1, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.created'`))
	require.Equal(t, 1, c.count(`SELECT count(*) FROM idempotency_keys WHERE key = 'retry-me-7f3a'`))
	c.requireReplayClean()
}

// A batch of 1,000 items with 10 bad ones (spread through it) makes 990
// tasks in one transaction and answers the 10 with their errors, in order;
// the log holds exactly one task.created per task and the projections are
// its fold.
func TestBatchOfAThousandWithTenBad(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	tt := c.reportType("import")
	items := make([]json.RawMessage, 1000)
	bad := map[int]string{}
	for i := range items {
		items[i] = json.RawMessage(fmt.Sprintf(`{"title":"task %d","task_type_id":%q,"params":{"n":%d}}`, i, tt.ID, i))
		if i%100 == 37 {
			switch len(bad) % 3 {
			case 0:
				items[i] = json.RawMessage(fmt.Sprintf(`{"title":"task %d","task_type_id":%q,"params":{"n":"not a number"}}`, i, tt.ID))
				bad[i] = fmt.Sprintf("tasks[%d].params.n", i)
			case 1:
				items[i] = json.RawMessage(fmt.Sprintf(`{"title":"","task_type_id":%q,"params":{"n":1}}`, tt.ID))
				bad[i] = fmt.Sprintf("tasks[%d].title", i)
			default:
				items[i] = json.RawMessage(fmt.Sprintf(`{"title":"task %d","task_type_id":%q,"params":{"n":1},"priority":"asap"}`, i, tt.ID))
				bad[i] = fmt.Sprintf("tasks[%d].priority", i)
			}
		}
	}
	require.Len(t, bad, 10)
	out, err := c.admin.CreateTasksRaw(c.ctx, items)
	require.NoError(t, err)
	require.Equal(t, 990, out.Created)
	require.Equal(t, 10, out.Failed)
	for i, it := range out.Items {
		if field, isBad := bad[i]; isBad {
			require.Equal(t, 400, it.Status, "item %d", i)
			require.Equal(t, field, it.Error.Field)
			continue
		}
		require.Equal(t, 201, it.Status, "item %d: %+v", i, it.Error)
		require.NotEmpty(t, it.ID)
	}
	require.Equal(t, 990, c.count(`SELECT count(*) FROM worker_tasks`))
	require.Equal(t, 990, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.created'`))
	require.Equal(t, 990, c.count(`SELECT count(*) FROM task_events WHERE stream_type = 'task'`))
	require.Equal(t, 1, c.count(`SELECT count(DISTINCT tx_id) FROM task_events WHERE stream_type = 'task'`), "one transaction")
	require.Equal(t, 990, c.count(`SELECT count(*) FROM task_titles`))
	c.requireReplayClean()
}
