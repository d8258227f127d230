package main_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// Bad input to the queue controls, freshness rules, LLM usage, task
// checkpoints, the release of a blocked task, the assignment history and
// the workflows list, through the binary: each gets a 4xx with a code and the
// field at fault, and nothing changes: no event is appended.
func TestControlsRefuseBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	t.Parallel()
	c := newCluster(t, 1)
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crawl"})
	require.NoError(t, err)
	pending, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "pending", TaskTypeID: tt.ID})
	require.NoError(t, err)
	w := c.worker("wendy", 1)
	held, err := w.clients[0].Claim(c.ctx)
	require.NoError(t, err)
	require.Equal(t, pending.ID, held.ID)
	_, err = c.admin.CreateTask(c.ctx, client.NewTask{Title: "keyed", TaskTypeID: tt.ID, UniqueKey: "nvda"})
	require.NoError(t, err)
	blocked, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "blocked", TaskTypeID: tt.ID,
		DependsOn: []string{held.ID}, OnDependencyFailure: "wait"})
	require.NoError(t, err)

	// A keyed request answered once; the same key with another body below.
	first := fmt.Sprintf(`{"title": "once", "task_type_id": %q}`, tt.ID)
	status, _ := c.send(t, http.MethodPost, "/api/v1/admin/workers/tasks", c.admin.Token(), first, "Idempotency-Key", "create-once-1")
	require.Equal(t, http.StatusCreated, status)

	task := func(extra string) string {
		return fmt.Sprintf(`{"title": "t", "task_type_id": %q, %s}`, tt.ID, extra)
	}
	batchOf := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(`{"title": "b%d", "task_type_id": %q}`, i, tt.ID)
		}
		return `{"tasks": [` + strings.Join(items, ",") + `]}`
	}
	// A whole freshness rule with one field replaced (the API refuses a
	// field given twice, so the case cannot just append it).
	rule := func(field string) string {
		r := map[string]string{
			"name": `"name": "watchlist"`, "task_type_id": fmt.Sprintf(`"task_type_id": %q`, tt.ID),
			"title_template": `"title_template": "Crawl {{key}}"`, "params_template": `"params_template": {"ticker": "{{key}}"}`,
			"max_age": `"max_age": "6h"`, "keys": `"keys": [{"key": "NVDA", "weight": 5}]`,
		}
		r[strings.Trim(strings.SplitN(field, ":", 2)[0], ` "`)] = field
		parts := make([]string, 0, len(r))
		for _, k := range []string{"name", "task_type_id", "title_template", "params_template", "max_age", "keys"} {
			parts = append(parts, r[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	admin, worker := c.admin.Token(), w.clients[0].Token()
	notHolder := c.worker("oscar", 1).clients[0].Token()
	for _, tc := range []struct {
		name, method, path, token, body string
		header                          []string
		status                          int
		code, field                     string
	}{
		{"run_at not RFC 3339", "POST", "/tasks", admin, task(`"run_at": "tomorrow"`), nil, 400, "validation_failed", "run_at"},
		{"run_at in year 0026", "POST", "/tasks", admin, task(`"run_at": "0026-11-26T09:00:00Z"`), nil, 400, "validation_failed", "run_at"},
		{"run_at edited to month 13", "PUT", "/tasks/" + pending.ID, admin, `{"run_at": "2026-13-01T00:00:00Z"}`, nil, 400, "validation_failed", "run_at"},
		{"unique_key of 201 characters", "POST", "/tasks", admin, task(`"unique_key": "` + strings.Repeat("k", 201) + `"`), nil, 400, "validation_failed", "unique_key"},
		{"unique_for negative", "POST", "/tasks", admin, task(`"unique_key": "k", "unique_for": "-6h"`), nil, 400, "validation_failed", "unique_for"},
		{"on_duplicate unknown", "POST", "/tasks", admin, task(`"unique_key": "nvda", "on_duplicate": "overwrite"`), nil, 400, "validation_failed", "on_duplicate"},
		{"an empty batch", "POST", "/tasks/batch", admin, `{"tasks": []}`, nil, 400, "validation_failed", "tasks"},
		{"a batch of 1,001", "POST", "/tasks/batch", admin, batchOf(1001), nil, 400, "validation_failed", "tasks"},
		{"rate_limit.count 0", "POST", "/task-types", admin, `{"name": "limited", "rate_limit": {"count": 0, "per": "1m"}}`, nil, 400, "validation_failed", "rate_limit.count"},
		{"rate_limit.per not a duration", "POST", "/task-types", admin, `{"name": "limited", "rate_limit": {"count": 5, "per": "soon"}}`, nil, 400, "validation_failed", "rate_limit.per"},
		{"concurrency_key not a JSON path", "POST", "/task-types", admin, `{"name": "keyed", "concurrency_key": "ticker", "max_in_progress_per_key": 1}`, nil, 400, "validation_failed", "concurrency_key"},
		{"max_in_progress negative", "PUT", "/task-types/" + tt.ID, admin, `{"name": "crawl", "max_in_progress": -1}`, nil, 400, "validation_failed", "max_in_progress"},
		{"a pause without a reason", "POST", "/task-types/" + tt.ID + "/pause", admin, `{}`, nil, 400, "validation_failed", "reason"},
		{"a pause reason over 10,000 bytes", "POST", "/task-types/" + tt.ID + "/pause", admin, `{"reason": "` + strings.Repeat("r", 10001) + `"}`, nil, 400, "validation_failed", "reason"},
		{"a bulk action that is none", "POST", "/tasks/bulk", admin, `{"action": "explode", "filter": {"status": "pending"}}`, nil, 400, "validation_failed", "action"},
		{"an Idempotency-Key reused with another body", "POST", "/tasks", admin, task(`"priority": "high"`), []string{"Idempotency-Key", "create-once-1"}, 422, "idempotency_key_reused", "Idempotency-Key"},
		{"a freshness title template that does not parse", "POST", "/api/v1/admin/freshness-rules", admin, rule(`"title_template": "Crawl {{key"`), nil, 400, "validation_failed", "title_template"},
		{"a freshness params template that does not parse", "POST", "/api/v1/admin/freshness-rules", admin, rule(`"params_template": {"ticker": "{{ key"}`), nil, 400, "validation_failed", "params_template"},
		{"a negative freshness max age", "POST", "/api/v1/admin/freshness-rules", admin, rule(`"max_age": "-6h"`), nil, 400, "validation_failed", "max_age"},
		{"a watchlist over the key limit", "POST", "/api/v1/admin/freshness-rules", admin, rule(`"keys": [` + strings.Repeat(`{"key": "k", "weight": 1},`, 10001) + `{"key": "last", "weight": 1}]`), nil, 400, "validation_failed", "keys"},
		{"a checkpoint over 64 KiB", "PUT", "/checkpoint", worker, `{"state": {"log": "` + strings.Repeat("x", 64<<10) + `"}}`, nil, 413, "too_large", "state"},
		{"a checkpoint that is not JSON", "PUT", "/checkpoint", worker, `{"state": session-42}`, nil, 400, "validation_failed", "body"},
		{"a checkpoint with a null state", "PUT", "/checkpoint", worker, `{"state": null}`, nil, 400, "validation_failed", "state"},
		{"a checkpoint by a worker that does not hold the task", "PUT", "/api/v1/worker/tasks/" + held.ID + "/checkpoint", notHolder, `{"state": {"session_id": "s"}}`, nil, 403, "forbidden", ""},
		{"usage with negative tokens", "POST", "/usage", worker, `{"model": "claude-sonnet-4-5", "input_tokens": -5}`, nil, 400, "validation_failed", "input_tokens"},
		{"a release of a task that is not blocked", "POST", "/tasks/" + pending.ID + "/release", admin, `{}`, nil, 409, "invalid_transition", ""},
		{"a release with a bad task id", "POST", "/tasks/not-a-uuid/release", admin, `{}`, nil, 400, "validation_failed", "id"},
		{"a release reason over 10,000 bytes", "POST", "/tasks/" + blocked.ID + "/release", admin, `{"reason": "` + strings.Repeat("r", 10001) + `"}`, nil, 400, "validation_failed", "reason"},
		{"a release asked by a worker", "POST", "/api/v1/admin/workers/tasks/" + blocked.ID + "/release", worker, `{}`, nil, 403, "forbidden", ""},
		{"the assignments of a bad task id", "GET", "/tasks/not-a-uuid/assignments", admin, "", nil, 400, "validation_failed", "id"},
		{"the assignments of an unknown task", "GET", "/tasks/00000000-0000-4000-8000-000000000000/assignments", admin, "", nil, 404, "not_found", ""},
		{"a workflows page of 0", "GET", "/workflows?limit=0", admin, "", nil, 400, "validation_failed", "limit"},
		{"a workflows cursor that is none", "GET", "/workflows?after=nope", admin, "", nil, 400, "validation_failed", "after"},
		// The account list's pages, and what the contract refuses now.
		{"a workers page of 0", "GET", "?limit=0", admin, "", nil, 400, "validation_failed", "limit"},
		{"a workers page with an empty limit", "GET", "?limit=", admin, "", nil, 400, "validation_failed", "limit"},
		{"a workers cursor over 1,200 characters", "GET", "?after=" + base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("a", 1000)+"|00000000-0000-4000-8000-000000000000")), admin, "", nil, 400, "validation_failed", "after"},
		{"a heartbeat status of null", "POST", "/api/v1/worker/heartbeat", worker, `{"status": null}`, nil, 400, "validation_failed", "status"},
		{"an assignment to a worker that is not there", "POST", "/tasks/" + blocked.ID + "/assign", admin, `{"assigned_to": "00000000-0000-4000-8000-000000000000", "reason": "r"}`, nil, 422, "unknown_reference", "assigned_to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/api/v1/admin/workers" + tc.path
			switch {
			case strings.HasPrefix(tc.path, "/api/"):
				path = tc.path
			case tc.token == worker:
				path = "/api/v1/worker/tasks/" + held.ID + tc.path
			}
			before := c.count(`SELECT count(*) FROM task_events`)
			status, body := c.send(t, tc.method, path, tc.token, tc.body, tc.header...)
			require.Equal(t, tc.status, status, body)
			var env struct {
				Error struct{ Code, Field string }
			}
			require.NoError(t, json.Unmarshal([]byte(body), &env), body)
			require.Equal(t, tc.code, env.Error.Code, body)
			require.Equal(t, tc.field, env.Error.Field, body)
			require.Equal(t, before, c.count(`SELECT count(*) FROM task_events`), "nothing appended")
		})
	}
}

// send makes one request with a bearer token and header pairs and returns
// the status and body.
func (c *cluster) send(t *testing.T, method, path, token, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(c.ctx, method, c.ins[0].base+path, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}
