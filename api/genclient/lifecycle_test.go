package genclient_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/genclient"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// serve starts the API on a fresh database with a first admin, every answer
// checked against the document.
func serve(t *testing.T) string {
	t.Helper()
	pool := storetest.NewPool(t)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	srv, err := api.New(api.Config{DB: db, JWTSecret: []byte("genclient-secret-0123456789"), BcryptCost: bcrypt.MinCost,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	doc, err := json.Marshal(srv.OpenAPI())
	require.NoError(t, err)
	contract := apitest.New(t, doc)
	ts := httptest.NewServer(contract.Handler(srv.Handler()))
	t.Cleanup(ts.Close)
	hash, err := srv.HashPassword("admin-password")
	require.NoError(t, err)
	_, err = db.CreateUser(context.Background(), events.UserRegistered{Email: "ada@example.com", FullName: "Ada", IsAdmin: true},
		"admin-password", hash, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	return ts.URL
}

// login returns a generated client that sends the user's token.
func login(t *testing.T, base, email, password string) *genclient.ClientWithResponses {
	t.Helper()
	ctx := context.Background()
	anon, err := genclient.NewClientWithResponses(base)
	require.NoError(t, err)
	resp, err := anon.LoginWithResponse(ctx, genclient.LoginJSONRequestBody{Email: email, Password: password})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "login: %d %s", resp.StatusCode(), resp.Body)
	token := resp.JSON200.Data.Token
	c, err := genclient.NewClientWithResponses(base, genclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	require.NoError(t, err)
	return c
}

func ptr[T any](v T) *T { return &v }

// TestGeneratedClientLifecycle drives a task from creation through a
// failure, a manual retry and completion with nothing but the client
// oapi-codegen generated from the document.
func TestGeneratedClientLifecycle(t *testing.T) {
	ctx := context.Background()
	base := serve(t)
	admin := login(t, base, "ada@example.com", "admin-password")

	w, err := admin.CreateWorkerWithResponse(ctx, &genclient.CreateWorkerParams{}, genclient.CreateWorkerJSONRequestBody{
		Email: "bot@example.com", Password: "worker-password", FullName: "Bot", MaxConcurrentTasks: ptr(2)})
	require.NoError(t, err)
	require.NotNil(t, w.JSON201, "create worker: %d %s", w.StatusCode(), w.Body)
	require.Equal(t, 2, w.JSON201.Data.MaxConcurrentTasks)

	tt, err := admin.CreateTaskTypeWithResponse(ctx, &genclient.CreateTaskTypeParams{}, genclient.CreateTaskTypeJSONRequestBody{Name: "report", MaxRetries: ptr(1),
		ParamSchema: &map[string]any{"type": "object", "required": []string{"days"}}})
	require.NoError(t, err)
	require.NotNil(t, tt.JSON201, "create type: %d %s", tt.StatusCode(), tt.Body)

	// A bad request comes back as the typed error with the field at fault.
	bad, err := admin.CreateTaskWithResponse(ctx, &genclient.CreateTaskParams{}, genclient.CreateTaskJSONRequestBody{Title: "no params", TaskTypeId: uuid.MustParse(tt.JSON201.Data.Id)})
	require.NoError(t, err)
	require.NotNil(t, bad.JSON400, "%d %s", bad.StatusCode(), bad.Body)
	require.Equal(t, genclient.ErrorCodeValidationFailed, bad.JSON400.Error.Code)
	require.Equal(t, "params", *bad.JSON400.Error.Field, "the object missing days")

	high := genclient.CreateTaskJSONBodyPriorityHigh
	created, err := admin.CreateTaskWithResponse(ctx, &genclient.CreateTaskParams{}, genclient.CreateTaskJSONRequestBody{Title: "Weekly report",
		TaskTypeId: uuid.MustParse(tt.JSON201.Data.Id), Params: &map[string]any{"days": 7}, Priority: &high})
	require.NoError(t, err)
	require.NotNil(t, created.JSON201, "create task: %d %s", created.StatusCode(), created.Body)
	taskID := created.JSON201.Data.Id

	pending := genclient.ListTasksParamsStatusPending
	list, err := admin.ListTasksWithResponse(ctx, &genclient.ListTasksParams{Status: &pending, Limit: ptr(10)})
	require.NoError(t, err)
	require.NotNil(t, list.JSON200, "%d %s", list.StatusCode(), list.Body)
	require.Len(t, list.JSON200.Data.Tasks, 1)
	require.Equal(t, 1, list.JSON200.Data.QueueDepth)

	bot := login(t, base, "bot@example.com", "worker-password")
	idle := genclient.Idle
	hb, err := bot.HeartbeatWithResponse(ctx, genclient.HeartbeatJSONRequestBody{Status: &idle})
	require.NoError(t, err)
	require.NotNil(t, hb.JSON200, "%d %s", hb.StatusCode(), hb.Body)
	require.True(t, hb.JSON200.Data.Online)

	claim := func() *genclient.TaskWithType {
		c, err := bot.ClaimTaskWithResponse(ctx, &genclient.ClaimTaskParams{})
		require.NoError(t, err)
		require.NotNil(t, c.JSON200, "claim: %d %s", c.StatusCode(), c.Body)
		return c.JSON200.Data
	}
	first := claim()
	require.NotNil(t, first)
	require.Equal(t, taskID, first.Id)
	require.Equal(t, genclient.TaskWithTypeStatusInProgress, first.Status)
	require.Equal(t, "report", first.TaskType.Name)
	require.Nil(t, claim(), "nothing else to claim: data is null")

	id := uuid.MustParse(taskID)
	up, err := bot.PostUpdateWithResponse(ctx, id, &genclient.PostUpdateParams{}, genclient.PostUpdateJSONRequestBody{Message: "reading the logs"})
	require.NoError(t, err)
	require.NotNil(t, up.JSON200, "%d %s", up.StatusCode(), up.Body)
	var result genclient.PostResultJSONBody_Result
	require.NoError(t, result.FromPostResultJSONBodyResult0(map[string]any{"pages": 3}))
	res, err := bot.PostResultWithResponse(ctx, id, genclient.PostResultJSONRequestBody{Result: result})
	require.NoError(t, err)
	require.NotNil(t, res.JSON200, "%d %s", res.StatusCode(), res.Body)
	failed, err := bot.SetTaskStatusWithResponse(ctx, id, genclient.SetTaskStatusJSONRequestBody{
		Status: genclient.SetTaskStatusJSONBodyStatusFailed, Reason: ptr("the upstream API timed out")})
	require.NoError(t, err)
	require.NotNil(t, failed.JSON200, "%d %s", failed.StatusCode(), failed.Body)
	require.Equal(t, genclient.TaskStatusFailed, failed.JSON200.Data.Status)

	// Completing a failed task is a conflict, typed as such.
	again, err := bot.SetTaskStatusWithResponse(ctx, id, genclient.SetTaskStatusJSONRequestBody{Status: genclient.SetTaskStatusJSONBodyStatusCompleted})
	require.NoError(t, err)
	require.NotNil(t, again.JSON409, "%d %s", again.StatusCode(), again.Body)

	retry, err := admin.RetryTaskWithResponse(ctx, id, &genclient.RetryTaskParams{}, genclient.RetryTaskJSONRequestBody{Hint: ptr("use the cached copy")})
	require.NoError(t, err)
	require.NotNil(t, retry.JSON201, "%d %s", retry.StatusCode(), retry.Body)
	require.Equal(t, taskID, *retry.JSON201.Data.ParentTaskId)

	second := claim()
	require.NotNil(t, second)
	require.Equal(t, retry.JSON201.Data.Id, second.Id)
	require.NotNil(t, second.PreviousAttempts)
	require.Len(t, *second.PreviousAttempts, 1, "the retry tells what went wrong before")
	done, err := bot.SetTaskStatusWithResponse(ctx, uuid.MustParse(second.Id), genclient.SetTaskStatusJSONRequestBody{Status: genclient.SetTaskStatusJSONBodyStatusCompleted})
	require.NoError(t, err)
	require.NotNil(t, done.JSON200, "%d %s", done.StatusCode(), done.Body)

	got, err := admin.GetTaskWithResponse(ctx, uuid.MustParse(second.Id), &genclient.GetTaskParams{})
	require.NoError(t, err)
	require.NotNil(t, got.JSON200, "%d %s", got.StatusCode(), got.Body)
	detail, err := got.JSON200.Data.AsTaskDetail()
	require.NoError(t, err)
	require.Equal(t, genclient.TaskDetailStatusCompleted, detail.Status)
	require.Equal(t, taskID, detail.Parent.Id)

	then, err := admin.GetTaskWithResponse(ctx, id, &genclient.GetTaskParams{At: ptr(first.StartedAt.Add(time.Millisecond))})
	require.NoError(t, err)
	require.NotNil(t, then.JSON200, "%d %s", then.StatusCode(), then.Body)
	asOf, err := then.JSON200.Data.AsTask()
	require.NoError(t, err)
	require.Equal(t, genclient.TaskStatusInProgress, asOf.Status, "as of just after the claim")

	chain, err := admin.GetTaskChainWithResponse(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, chain.JSON200, "%d %s", chain.StatusCode(), chain.Body)
	require.Len(t, chain.JSON200.Data.Attempts, 2)

	evs, err := admin.ListTaskEventsWithResponse(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, evs.JSON200, "%d %s", evs.StatusCode(), evs.Body)
	var types []string
	for _, e := range evs.JSON200.Data {
		types = append(types, e.Type)
	}
	require.Subset(t, types, []string{"task.created", "task.claimed", "task.update_posted", "task.result_posted", "task.failed", "task.retried"})

	stats, err := admin.GetStatsWithResponse(ctx)
	require.NoError(t, err)
	require.NotNil(t, stats.JSON200, "%d %s", stats.StatusCode(), stats.Body)
	require.Equal(t, 1, stats.JSON200.Data.ByStatus["completed"])
	require.Equal(t, 1, stats.JSON200.Data.ByStatus["failed"])
}
