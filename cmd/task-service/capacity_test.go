package main_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// GET /admin/workers/capacity through the binary: one page of the workers
// at a time, the sums over all of them, and a bad limit or cursor a 400
// naming its parameter.
func TestCapacityPagesThroughTheBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	for _, email := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		_, err := admin.CreateWorker(ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: email, MaxConcurrentTasks: 2})
		require.NoError(t, err)
	}

	first, err := admin.Capacity(ctx, client.AccountQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, first.Workers, 2)
	require.NotEmpty(t, first.NextCursor)
	require.Equal(t, 6, first.TotalSlots, "the sums cover every worker, not the page")
	rest, err := admin.Capacity(ctx, client.AccountQuery{Limit: 2, After: first.NextCursor})
	require.NoError(t, err)
	require.Len(t, rest.Workers, 1)
	require.Empty(t, rest.NextCursor)
	require.Equal(t, 6, rest.TotalSlots)

	for query, field := range map[string]string{"limit=0": "limit", "limit=100000": "limit", "limit=x": "limit", "after=not-a-cursor": "after"} {
		var out store.Capacity
		err := admin.Do(ctx, http.MethodGet, "/api/v1/admin/workers/capacity?"+query, nil, &out)
		var apiErr *client.Error
		require.True(t, errors.As(err, &apiErr), "%s: %v", query, err)
		require.Equal(t, http.StatusBadRequest, apiErr.Status, query)
		require.Equal(t, field, apiErr.Field, query)
	}
}
