package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

// Every field the schema refuses is shown at its own input, each once, on
// the new-task form and on the edit form.
func TestFormsShowEverySchemaErrorOnceAtItsField(t *testing.T) {
	s := newSite(t)
	s.login()
	token := s.csrf()
	tt, err := s.srv.CreateTaskType(s.ctx, api.TaskTypeRequest{Name: "crawl", Label: "Crawl", SOP: "Crawl.",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["ticker","days"]}`)}, s.admin)
	require.NoError(t, err)

	resp, body := s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"No ticker, no days"}, "p.days": {"0"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-params-ticker"[^>]*aria-invalid="true"`, body, "the missing ticker at its input")
	require.Regexp(t, `id="f-params-days"[^>]*aria-invalid="true"`, body, "days=0 at its input too")
	require.Contains(t, body, "params.ticker: is required")
	require.Contains(t, body, "params.days: minimum")

	task, _, err := s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: "Crawl NVDA", TaskTypeID: tt.ID,
		Params: json.RawMessage(`{"ticker":"NVDA","days":3}`)}, s.admin)
	require.NoError(t, err)
	resp, body = s.post("/tasks/"+task.ID+"/edit", url.Values{"_csrf": {token}, "title": {"Crawl NVDA"}, "params": {`{"ticker":"NVDA","days":0}`}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "params.days: minimum")
	require.NotContains(t, body, "params.days: params.days", "the field is named once")
	require.Equal(t, 1, strings.Count(body, "params.days:"))
}

// Nested objects, arrays of integers and enums of numbers are inputs too,
// built into params of the right shape; an error inside an object lands at
// its input.
func TestNewTaskFormBuildsNestedParams(t *testing.T) {
	s := newSite(t)
	s.login()
	token := s.csrf()
	tt, err := s.srv.CreateTaskType(s.ctx, api.TaskTypeRequest{Name: "nested", Label: "Nested", SOP: "Do it.",
		ParamSchema: json.RawMessage(`{"type":"object","required":["owner"],"properties":{
			"owner":{"type":"object","required":["email"],"properties":{"email":{"type":"string","format":"email"},"team":{"type":"object","properties":{"size":{"type":"integer"}}}}},
			"days":{"type":"array","items":{"type":"integer","minimum":1}},
			"level":{"enum":[1,2,3]}}}`)}, s.admin)
	require.NoError(t, err)

	_, body := s.get("/tasks/new?type=" + tt.ID)
	for _, id := range []string{"f-params-owner-email", "f-params-owner-team-size", "f-params-days", "f-params-level"} {
		require.Contains(t, body, `id="`+id+`"`)
	}
	require.NotContains(t, body, `placeholder="JSON"`, "no field falls back to raw JSON")

	resp, body := s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"Bad size"},
		"p.owner.team.size": {"many"}, "p.days": {"1\n0"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-params-owner-team-size"[^>]*aria-invalid="true"`, body)
	require.Regexp(t, `id="f-params-owner-email"[^>]*aria-invalid="true"`, body, "the missing email at its input")
	require.Contains(t, body, "params.days.1: minimum", "an item's error, shown at the fieldset")

	resp, _ = s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"Nested"},
		"p.owner.email": {"ops@example.com"}, "p.owner.team.size": {"4"}, "p.days": {"1\n7\n"}, "p.level": {"2"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	id := strings.TrimPrefix(resp.Header.Get("Location"), "/tasks/")
	task, err := s.db.GetTask(s.ctx, s.db.Pool(), id)
	require.NoError(t, err)
	require.JSONEq(t, `{"owner":{"email":"ops@example.com","team":{"size":4}},"days":[1,7],"level":2}`, string(task.Params))
}
