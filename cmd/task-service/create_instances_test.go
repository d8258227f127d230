package main_test

import (
	"encoding/json"
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
