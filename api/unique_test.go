package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// A creation with a unique key another task holds answers 409
// duplicate_task naming that task, or, with on_duplicate "existing", 200
// and that task; neither writes anything. The key shows on the task.
func TestUniqueKeyAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	nt := client.NewTask{Title: "crawl NVDA", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`), UniqueKey: "crawl:NVDA", UniqueFor: "6h"}
	first, created, err := b.admin.CreateTaskOnce(b.ctx, nt)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "crawl:NVDA", *first.UniqueKey)
	b.requireProjectionIsFold(t, first.ID)
	before := b.snapshot(t)

	_, err = b.admin.CreateTask(b.ctx, nt)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
	require.Equal(t, "duplicate_task", apiErr.Code)
	require.Equal(t, "unique_key", apiErr.Field)
	require.Equal(t, map[string]string{"existing_task_id": first.ID}, apiErr.Details)

	nt.OnDuplicate = "existing"
	nt.Title = "another title"
	got, created, err := b.admin.CreateTaskOnce(b.ctx, nt)
	require.NoError(t, err)
	require.False(t, created, "200, not 201")
	require.Equal(t, first.ID, got.ID)
	require.Equal(t, "crawl NVDA", got.Title, "the task that holds the key, as it is")
	require.Equal(t, before, b.snapshot(t), "a duplicate writes nothing")

	// Another key, or none, is another task.
	nt.UniqueKey, nt.UniqueFor = "crawl:AMD", ""
	_, created, err = b.admin.CreateTaskOnce(b.ctx, nt)
	require.NoError(t, err)
	require.True(t, created)
}
