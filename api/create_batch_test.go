package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// A batch answers every item in order with its own status: the good ones
// are created (together), each bad one is refused alone naming its field
// from the request's root, a duplicate key fails (or with on_duplicate
// existing answers the holder) and nothing else is written.
func TestCreateTasksBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	w := b.newWorker(t, "Una", 1)
	holder, err := b.admin.CreateTask(b.ctx, client.NewTask{Title: "holds k", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`), UniqueKey: "k"})
	require.NoError(t, err)
	good := func(title string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"title":%q,"task_type_id":%q,"params":{"days":2}}`, title, tt.ID))
	}
	items := []json.RawMessage{
		good("first"),
		json.RawMessage(`{"title":"no type"}`),
		json.RawMessage(fmt.Sprintf(`{"title":"bad params","task_type_id":%q,"params":{"days":0}}`, tt.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"odd field","task_type_id":%q,"params":{"days":1},"colour":"red"}`, tt.ID)),
		json.RawMessage(`"not an object"`),
		json.RawMessage(fmt.Sprintf(`{"title":"nul \u0000","task_type_id":%q,"params":{"days":1}}`, tt.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"dup","task_type_id":%q,"params":{"days":1},"unique_key":"k"}`, tt.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"dup ok","task_type_id":%q,"params":{"days":1},"unique_key":"k","on_duplicate":"existing"}`, tt.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"new key","task_type_id":%q,"params":{"days":1},"unique_key":"n"}`, tt.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"same new key","task_type_id":%q,"params":{"days":1},"unique_key":"n"}`, tt.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"assigned","task_type_id":%q,"params":{"days":1},"assigned_to":%q}`, tt.ID, w.ID)),
		json.RawMessage(fmt.Sprintf(`{"title":"long key","task_type_id":%q,"params":{"days":1},"unique_key":%q}`, tt.ID, strings.Repeat("x", 201))),
		good("last"),
	}
	out, err := b.admin.CreateTasksRaw(b.ctx, items)
	require.NoError(t, err)
	require.Len(t, out.Items, len(items))
	type want struct {
		status      int
		code, field string
	}
	wants := []want{
		{201, "", ""},
		{400, "validation_failed", "tasks[1].task_type_id"},
		{400, "validation_failed", "tasks[2].params.days"},
		{400, "validation_failed", "tasks[3].colour"},
		{400, "validation_failed", "tasks[4]"},
		{400, "validation_failed", "tasks[5].title"},
		{409, "duplicate_task", "tasks[6].unique_key"},
		{200, "", ""},
		{201, "", ""},
		{409, "duplicate_task", "tasks[9].unique_key"},
		{201, "", ""},
		{400, "validation_failed", "tasks[11].unique_key"},
		{201, "", ""},
	}
	for i, wnt := range wants {
		it := out.Items[i]
		require.Equal(t, wnt.status, it.Status, "item %d: %+v", i, it.Error)
		if wnt.code == "" {
			require.True(t, it.Success)
			require.NotEmpty(t, it.ID)
			continue
		}
		require.False(t, it.Success)
		require.Equal(t, wnt.code, it.Error.Code, "item %d", i)
		require.Equal(t, wnt.field, it.Error.Field, "item %d: %s", i, it.Error.Message)
	}
	require.Equal(t, holder.ID, out.Items[7].ID)
	require.Equal(t, out.Items[8].ID, out.Items[9].Error.Details["existing_task_id"])
	require.Equal(t, holder.ID, out.Items[6].Error.Details["existing_task_id"])
	require.Equal(t, 4, out.Created)
	require.Equal(t, 8, out.Failed)
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM worker_tasks`))
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM task_events WHERE type = 'task.created'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM task_events WHERE type = 'task.assigned'`))
	for _, i := range []int{0, 8, 10, 12} {
		b.requireProjectionIsFold(t, out.Items[i].ID)
	}
	st, err := b.admin.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, st["by_status"].(map[string]any)["pending"], "the counters count the batch: %v", st)
	require.EqualValues(t, 4, st["queue_depth"], "the assigned one is not in the queue")

	// A request-level mistake refuses it whole.
	before := b.snapshot(t)
	for _, c := range []struct{ body, field string }{
		{`{"tasks":[]}`, "tasks"},
		{`{}`, "tasks"},
		{`{"tasks":{}}`, "tasks"},
		{`{"tasks":[` + strings.TrimSuffix(strings.Repeat(string(good("x"))+",", 1001), ",") + `]}`, "tasks"},
		{`[]`, "body"},
		{`{"tasks":[],"more":1}`, "more"},
	} {
		status, body, _ := b.keyed(t, b.admin.Token(), "POST", "/api/v1/admin/workers/tasks/batch", fmt.Sprintf("bad-%d", len(c.body)), c.body)
		require.Equal(t, http.StatusBadRequest, status, body)
		requireError(t, body, "validation_failed", c.field)
	}
	require.Equal(t, before, b.snapshot(t), "nothing changed")
}
