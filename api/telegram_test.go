package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

const testHookSecret = "hook-secret-for-tests"

func telegramSetup(t *testing.T) *bundle {
	return setupWith(t, nil, func(c *api.Config) {
		c.Telegram = api.TelegramConfig{WebhookSecret: testHookSecret,
			AllowedChats: map[int64]bool{-100: true}, AdminUsers: map[int64]bool{42: true}}
	})
}

// webhook posts body with secret and decodes the envelope.
func (b *bundle) webhook(t *testing.T, secret, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, b.url+"/api/v1/telegram/webhook", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.TelegramSecretHeader, secret)
	resp, err := b.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var env map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&env))
	return resp.StatusCode, env
}

func command(id int, chat, user int64, text string) string {
	return fmt.Sprintf(`{"update_id":%d,"message":{"message_id":1,"date":1,"from":{"id":%d,"is_bot":false,"first_name":"Al","username":"al"},
		"chat":{"id":%d,"type":"group","title":"ops"},"text":%q,"entities":[{"type":"bot_command","offset":0,"length":5}]}}`, id, user, chat, text)
}

func (b *bundle) replyTo(t *testing.T, updateID int) string {
	t.Helper()
	var text string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT text FROM telegram_outbox WHERE kind = 'telegram.reply' AND event_seq = $1`, updateID).Scan(&text))
	return text
}

func TestTelegramWebhook(t *testing.T) {
	b := telegramSetup(t)
	tt := b.newType(t, "crawl")
	first := b.newTask(t, tt, "first", events.PriorityHigh, "")
	b.newTask(t, tt, "second", events.PriorityHigh, "")

	status, env := b.webhook(t, "nope", command(1, -100, 42, "/status"))
	require.Equal(t, http.StatusUnauthorized, status, env)
	status, env = b.webhook(t, testHookSecret, `{"update_id": -3}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "update_id", env["error"].(map[string]any)["field"])
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM telegram_updates`).Scan(&n))
	require.Zero(t, n)

	status, env = b.webhook(t, testHookSecret, command(2, -100, 42, "/cancel "+first.ID+" not needed"))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"update_id": 2.0, "outcome": "ran", "command": "cancel"}, env["data"])
	require.Equal(t, "🛑 Cancelled first.", b.replyTo(t, 2))
	task, err := b.admin.Task(b.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusCancelled, task.Status)

	// A command that fails changes nothing, and is still answered once.
	status, env = b.webhook(t, testHookSecret, command(3, -100, 42, "/cancel "+first.ID))
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, b.replyTo(t, 3), "⚠️ cannot cancel")
	status, env = b.webhook(t, testHookSecret, command(3, -100, 42, "/cancel "+first.ID))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "duplicate", env["data"].(map[string]any)["outcome"])

	// A prefix that fits both tasks' ids (UUIDv7: the creation time first).
	b.webhook(t, testHookSecret, command(4, -100, 42, "/task "+first.ID[:4]))
	require.Equal(t, "⚠️ task: &#34;"+first.ID[:4]+"&#34; matches more than one task; type more of its id", b.replyTo(t, 4))

	status, env = b.webhook(t, testHookSecret, command(5, -7, 7, "/status"))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "refused", env["data"].(map[string]any)["outcome"])
}

func TestTaskTypeAliasAndParamsTemplate(t *testing.T) {
	b := setup(t)
	tt, err := b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: "reddit_crawl", Alias: " Reddit ",
		ParamsTemplate: json.RawMessage(`{"ticker": "{{key}}"}`)})
	require.NoError(t, err)
	require.Equal(t, "reddit", tt.Alias)
	require.JSONEq(t, `{"ticker": "{{key}}"}`, string(tt.ParamsTemplate))
	got, err := b.admin.TaskType(b.ctx, tt.ID)
	require.NoError(t, err)
	require.Equal(t, tt.Alias, got.Alias)
	require.Equal(t, string(tt.ParamsTemplate), string(got.ParamsTemplate))

	for _, bad := range []struct {
		nt     client.NewTaskType
		status int
		field  string
	}{
		{client.NewTaskType{Name: "a", Alias: "reddit"}, http.StatusConflict, "alias"},
		{client.NewTaskType{Name: "b", Alias: "no spaces"}, http.StatusBadRequest, "alias"},
		{client.NewTaskType{Name: "c", Alias: strings.Repeat("x", 33)}, http.StatusBadRequest, "alias"},
		{client.NewTaskType{Name: "d", ParamsTemplate: json.RawMessage(`{"a": "{{key}}", "a": "x"}`)}, http.StatusBadRequest, "params_template.a"},
		{client.NewTaskType{Name: "e", ParamsTemplate: json.RawMessage(`["{{key}}"]`)}, http.StatusBadRequest, "params_template"},
		{client.NewTaskType{Name: "f", ParamsTemplate: json.RawMessage(`{"{{key}}": 1}`)}, http.StatusBadRequest, "params_template"},
	} {
		_, err := b.admin.CreateTaskType(b.ctx, bad.nt)
		require.True(t, client.IsStatus(err, bad.status), "%+v: %v", bad.nt, err)
		var apiErr *client.Error
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, bad.field, apiErr.Field, "%+v: %v", bad.nt, err)
	}
	// An edit keeps or changes them; the alias is free again once changed.
	upd, err := b.admin.UpdateTaskType(b.ctx, tt.ID, client.NewTaskType{Name: "reddit_crawl", Alias: "rd"})
	require.NoError(t, err)
	require.Equal(t, "rd", upd.Alias)
	require.Nil(t, upd.ParamsTemplate)
	_, err = b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: "other", Alias: "reddit"})
	require.NoError(t, err)
}
