package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// Refusals name what they refuse: a task type is not "a task", and a number
// too large for its field is not "a number, not number".
func TestRefusalsSayWhatTheyMean(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "wording")
	require.NoError(t, b.admin.Do(b.ctx, http.MethodPost, "/api/v1/admin/workers/task-types/"+tt.ID+"/archive", nil, nil))

	var apiErr *client.Error
	err := b.admin.Do(b.ctx, http.MethodPost, "/api/v1/admin/workers/task-types/"+tt.ID+"/archive", nil, nil)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "cannot archive a task type that is archived", apiErr.Message)
	_, err = b.admin.UpdateTaskType(b.ctx, tt.ID, client.NewTaskType{Name: tt.Name, Label: "Report"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "cannot update a task type that is archived", apiErr.Message)

	for _, huge := range []string{"1e400", "99999999999999999999", "1.5"} {
		err = b.admin.Do(b.ctx, http.MethodPost, "/api/v1/admin/workers/task-types",
			json.RawMessage(`{"name":"big","label":"Big","sop":"do it","max_retries":`+huge+`}`), nil)
		require.ErrorAs(t, err, &apiErr, huge)
		require.Equal(t, http.StatusBadRequest, apiErr.Status)
		require.Equal(t, "max_retries", apiErr.Field)
		require.Equal(t, "max_retries: is out of range or not a whole number: "+huge, apiErr.Message)
	}
}
