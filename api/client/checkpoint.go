package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/clawdbot/task-service/store"
)

// PutCheckpoint saves state (JSON) as the task's latest checkpoint; the
// task's next attempt receives it in its claim answer.
func (c *Client) PutCheckpoint(ctx context.Context, id string, state json.RawMessage) (*store.CheckpointSaved, error) {
	var out store.CheckpointSaved
	body := map[string]json.RawMessage{"state": state}
	return &out, c.Do(ctx, http.MethodPut, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/checkpoint", body, &out)
}
