package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// The answers the seed's task manager reads: a created or listed task
// carries its type and max_retries; an assignment answers the task and the
// assignment, and the task's assignment history is a route of its own; the
// fleet's views count the tasks waiting for each worker.
func TestSeedAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "reddit_crawl") // max_retries 2
	w := b.newWorker(t, "Genesis", 2)

	type taskAnswer struct {
		ID         string `json:"id"`
		MaxRetries *int   `json:"max_retries"`
		TaskType   *struct {
			ID         string `json:"id"`
			Name       string `json:"name"`
			Label      string `json:"label"`
			MaxRetries int    `json:"max_retries"`
		} `json:"task_type"`
	}
	var created taskAnswer
	require.NoError(t, b.admin.Do(ctx, http.MethodPost, "/api/v1/admin/workers/tasks",
		client.NewTask{Title: "Reddit crawl for NVDA", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":3}`)}, &created))
	require.NotNil(t, created.MaxRetries, "max_retries is not null")
	require.Equal(t, 2, *created.MaxRetries)
	require.NotNil(t, created.TaskType)
	require.Equal(t, tt.ID, created.TaskType.ID)
	require.Equal(t, "reddit_crawl", created.TaskType.Name)
	require.Equal(t, "Report", created.TaskType.Label)
	require.Equal(t, 2, created.TaskType.MaxRetries)

	var page struct {
		Tasks []taskAnswer `json:"tasks"`
	}
	require.NoError(t, b.admin.Do(ctx, http.MethodGet, "/api/v1/admin/workers/tasks", nil, &page))
	require.Len(t, page.Tasks, 1)
	require.Equal(t, created.ID, page.Tasks[0].ID)
	require.NotNil(t, page.Tasks[0].TaskType)
	require.Equal(t, "reddit_crawl", page.Tasks[0].TaskType.Name)
	require.Equal(t, 2, *page.Tasks[0].MaxRetries)

	// Assign: the task and the assignment, then the history.
	a, err := b.admin.Assign(ctx, created.ID, w.ID, "auto: least loaded online worker (0 in_progress tasks)")
	require.NoError(t, err)
	require.Equal(t, created.ID, a.Task.ID)
	require.Equal(t, w.ID, *a.Task.AssignedTo)
	require.NotNil(t, a.Assignment)
	require.Equal(t, w.ID, a.Assignment.WorkerID)
	require.Equal(t, "Genesis", a.Assignment.WorkerName)
	require.Equal(t, b.adminID, *a.Assignment.AssignedBy)
	require.Equal(t, "auto: least loaded online worker (0 in_progress tasks)", a.Assignment.Reason)
	require.Equal(t, "assigned", a.Assignment.Kind)

	// The worker's pending_count counts the task waiting for it, until it is claimed.
	requirePending := func(want int) {
		t.Helper()
		capacity, err := b.admin.Capacity(ctx, client.AccountQuery{})
		require.NoError(t, err)
		require.Len(t, capacity.Workers, 1)
		require.Equal(t, want, capacity.Workers[0].PendingCount, "capacity")
		ws, err := b.admin.Workers(ctx)
		require.NoError(t, err)
		require.Equal(t, want, ws[0].PendingCount, "workers")
	}
	requirePending(1)
	_, err = w.Claim(ctx)
	require.NoError(t, err)
	requirePending(0)

	history, err := b.admin.TaskAssignments(ctx, created.ID)
	require.NoError(t, err)
	require.Len(t, history, 2)
	require.Equal(t, *a.Assignment, history[0])
	require.Equal(t, "claimed", history[1].Kind)
	require.Equal(t, "Genesis", history[1].WorkerName)

	var apiErr *client.Error
	_, err = b.admin.TaskAssignments(ctx, "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.Status)
	_, err = b.admin.TaskAssignments(ctx, "nope")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Equal(t, "id", apiErr.Field)
}

// An admin-only account is made in one call and listed with role=admin or
// role=any; the default listing stays the workers.
func TestAdminOnlyAccounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	no := false
	ops, err := b.admin.CreateWorker(ctx, client.NewWorker{Email: "ops@example.com", Password: "ops-password-1", FullName: "Ops", IsAdmin: true, IsWorker: &no})
	require.NoError(t, err)
	require.True(t, ops.IsAdmin)
	require.False(t, ops.IsWorker)
	both, err := b.admin.CreateWorker(ctx, client.NewWorker{Email: "lead@example.com", Password: "lead-password-1", FullName: "Lead", IsAdmin: true})
	require.NoError(t, err)
	require.True(t, both.IsAdmin && both.IsWorker)
	w := b.newWorker(t, "Genesis", 1)

	ids := func(role string) []string {
		t.Helper()
		list, err := b.admin.Accounts(ctx, role)
		require.NoError(t, err)
		var out []string
		for _, a := range list {
			out = append(out, a.ID)
		}
		return out
	}
	require.ElementsMatch(t, []string{both.ID, w.ID}, ids("worker"))
	require.ElementsMatch(t, []string{b.adminID, ops.ID, both.ID}, ids("admin"))
	require.ElementsMatch(t, []string{b.adminID, ops.ID, both.ID, w.ID}, ids("any"))
	workers, err := b.admin.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 2, "no role: the workers, as before")

	var apiErr *client.Error
	_, err = b.admin.Accounts(ctx, "robots")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Equal(t, "role", apiErr.Field)
	_, err = b.admin.CreateWorker(ctx, client.NewWorker{Email: "nobody@example.com", Password: "nobody-password", FullName: "Nobody", IsWorker: &no})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.Status)
	require.Equal(t, "role", apiErr.Field)
}
