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
