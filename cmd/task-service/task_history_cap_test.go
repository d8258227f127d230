package main_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// A worker in a loop cannot grow a task's history without bound: once it
// holds events.MaxTaskEvents events, an update, a checkpoint, a result, a
// usage report and an upload are each refused 413 naming what was refused,
// nothing is written, and the worker can still complete the task. (The
// history is brought near the bound by SQL: 10,000 requests would only
// make the test slow.)
func TestTaskHistoryIsBounded(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	tt := c.reportType("chatty")
	w := c.worker("chatty", 1).clients[0]
	task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "loops", TaskTypeID: tt.ID, Params: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	claimed, err := w.Claim(c.ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, claimed.ID)
	_, err = c.pool.Exec(c.ctx, `UPDATE worker_tasks SET version = $2 - 1 WHERE id = $1`, task.ID, events.MaxTaskEvents)
	require.NoError(t, err)

	require.NoError(t, w.PostUpdate(c.ctx, task.ID, "the last one that fits"), "the history's last place")
	events0 := c.count(`SELECT count(*) FROM task_events WHERE stream_id = $1`, task.ID)
	refused := func(field string, err error) {
		t.Helper()
		var apiErr *client.Error
		require.True(t, errors.As(err, &apiErr), "%v", err)
		require.Equal(t, http.StatusRequestEntityTooLarge, apiErr.Status, "%v", err)
		require.Equal(t, field, apiErr.Field, "%v", err)
		require.Contains(t, apiErr.Message, "complete, fail or release")
	}
	refused("message", w.PostUpdate(c.ctx, task.ID, "one too many"))
	_, err = w.PutCheckpoint(c.ctx, task.ID, json.RawMessage(`{"cursor": 7}`))
	refused("state", err)
	refused("result", w.PostResult(c.ctx, task.ID, map[string]int{"posts": 1}))
	_, err = w.ReportUsage(c.ctx, task.ID, events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 5})
	refused("body", err)
	_, err = w.UploadData(c.ctx, task.ID, "posts", "page.json", "application/json", strings.NewReader(`{}`), 2)
	refused("body", err)
	require.Equal(t, events0, c.count(`SELECT count(*) FROM task_events WHERE stream_id = $1`, task.ID), "nothing written")

	done, err := w.Complete(c.ctx, task.ID)
	require.NoError(t, err, "the worker can still complete it")
	require.Equal(t, events.StatusCompleted, done.Status)
}
