package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// A limited type's usage: its tasks in progress and its keys at their limit.
func TestTaskTypeUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	three, one := 3, 1
	tt, err := b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: "crawl", MaxInProgress: &three,
		ConcurrencyKey: "$.ticker", MaxInProgressPerKey: &one})
	require.NoError(t, err)
	for _, ticker := range []string{"NVDA", "NVDA", "AAPL"} {
		_, err := b.admin.CreateTask(b.ctx, client.NewTask{Title: ticker, TaskTypeID: tt.ID,
			Params: json.RawMessage(`{"ticker":"` + ticker + `"}`)})
		require.NoError(t, err)
	}
	w := b.newWorker(t, "Crawler", 5)
	got, err := w.ClaimMany(b.ctx, 5, 0)
	require.NoError(t, err)
	require.Len(t, got, 2, "one task a key")

	u, err := b.admin.TaskTypeUsage(b.ctx, tt.ID)
	require.NoError(t, err)
	require.Equal(t, 2, u.InProgress)
	require.Equal(t, 2, u.KeysInProgress)
	require.Equal(t, 2, u.KeysAtLimit)
	require.Nil(t, u.ClaimsInWindow, "no rate limit")
}
