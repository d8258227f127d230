package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Workflows and dependencies through the API: a diamond created at once,
// worked in order with each task's inputs on its claim, its status and
// progress; bad graphs refused naming the item with nothing created; a
// dependency on a task id, its release, and a workflow cancelled.
func TestWorkflowsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "crawl")
	w := b.newWorker(t, "Genesis", 4)
	item := func(ref string, deps ...string) client.NewWorkflowTask {
		return client.NewWorkflowTask{Ref: ref, Title: "do " + ref, TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`), DependsOn: deps}
	}
	wf, err := b.admin.CreateWorkflow(ctx, client.NewWorkflow{Name: "NVDA sentiment", Tasks: []client.NewWorkflowTask{
		item("reddit"), item("stocktwits"), item("report", "reddit", "stocktwits")}})
	require.NoError(t, err)
	require.Equal(t, store.WorkflowRunning, wf.Status)
	require.Equal(t, store.WorkflowProgress{Total: 3, Pending: 2, Blocked: 1}, wf.Progress)
	taskOf, depsOf := map[string]string{}, map[string][]string{}
	for _, n := range wf.Tasks {
		taskOf[n.Ref], depsOf[n.Ref] = n.TaskID, n.DependsOn
	}
	require.ElementsMatch(t, []string{"reddit", "stocktwits"}, depsOf["report"])
	require.Empty(t, depsOf["reddit"])

	blocked, err := b.admin.Tasks(ctx, client.TaskQuery{Status: "blocked"})
	require.NoError(t, err)
	require.Len(t, blocked.Tasks, 1)

	for range 2 {
		got, err := w.Claim(ctx)
		require.NoError(t, err)
		require.NotEqual(t, taskOf["report"], got.ID, "the report waits for both crawls")
		require.NoError(t, w.PostResult(ctx, got.ID, map[string]string{"from": *got.Ref}))
		_, err = w.Complete(ctx, got.ID)
		require.NoError(t, err)
	}
	claimed, err := w.ClaimMany(ctx, 1, 0)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	report := claimed[0]
	require.Equal(t, taskOf["report"], report.ID)
	require.Len(t, report.Inputs, 2)
	for _, in := range report.Inputs {
		require.Equal(t, taskOf[*in.Ref], in.TaskID)
		require.JSONEq(t, fmt.Sprintf(`{"from":%q}`, *in.Ref), string(in.Result))
	}
	_, err = w.Complete(ctx, report.ID)
	require.NoError(t, err)
	done, err := b.admin.Workflow(ctx, wf.ID)
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCompleted, done.Status)
	require.NotNil(t, done.FinishedAt)
	page, err := b.admin.Workflows(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, page.Workflows, 1)
	require.Equal(t, 3, page.Workflows[0].Progress.Completed)

	// Bad graphs: a 400 naming the item, and nothing created.
	for _, c := range []struct {
		tasks []client.NewWorkflowTask
		field string
	}{
		{[]client.NewWorkflowTask{item("a", "b"), item("b", "a")}, "tasks[0].depends_on"},
		{[]client.NewWorkflowTask{item("a", "a")}, "tasks[0].depends_on[0]"},
		{[]client.NewWorkflowTask{item("a", "nope")}, "tasks[0].depends_on[0]"},
		{[]client.NewWorkflowTask{item("a"), {Ref: "b", Title: "b", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":0}`)}}, "tasks[1].params.days"},
	} {
		_, err := b.admin.CreateWorkflow(ctx, client.NewWorkflow{Name: "bad", Tasks: c.tasks})
		requireAPIError(t, err, http.StatusBadRequest, "validation_failed", c.field)
	}
	page, err = b.admin.Workflows(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, page.Workflows, 1, "nothing created")

	// A task that depends on a task id, released by an admin.
	first := b.newTask(t, tt, "first", events.PriorityLow, "")
	waiting, err := b.admin.CreateTask(ctx, client.NewTask{Title: "second", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`),
		DependsOn: []string{first.ID}, OnDependencyFailure: "wait"})
	require.NoError(t, err)
	require.Equal(t, events.StatusBlocked, waiting.Status)
	_, err = b.admin.CreateTask(ctx, client.NewTask{Title: "bad", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`),
		DependsOn: []string{"not-an-id"}})
	requireAPIError(t, err, http.StatusBadRequest, "validation_failed", "depends_on[0]")
	released, err := b.admin.ReleaseTask(ctx, waiting.ID, "no need to wait")
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, released.Status)
	_, err = b.admin.ReleaseTask(ctx, waiting.ID, "")
	requireAPIError(t, err, http.StatusConflict, "invalid_transition", "")

	// Cancelling a workflow cancels what may still run.
	wf2, err := b.admin.CreateWorkflow(ctx, client.NewWorkflow{Name: "stop me", Tasks: []client.NewWorkflowTask{item("a"), item("b", "a")}})
	require.NoError(t, err)
	cancelled, err := b.admin.CancelWorkflow(ctx, wf2.ID, "changed my mind")
	require.NoError(t, err)
	require.Equal(t, store.WorkflowCancelled, cancelled.Status)
	require.Equal(t, 2, cancelled.Progress.Cancelled)
	_, err = b.admin.CancelWorkflow(ctx, wf2.ID, "")
	requireAPIError(t, err, http.StatusConflict, "invalid_transition", "")
	_, err = b.admin.Workflow(ctx, "0190f1f6-0000-7000-8000-000000000000")
	requireAPIError(t, err, http.StatusNotFound, "not_found", "")
}
