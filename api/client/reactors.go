package client

import (
	"context"
	"net/url"

	"github.com/clawdbot/task-service/events"
)

// RetryTask creates the retry of a failed task now, by hand, with an
// optional hint for the next attempt; it returns the new task.
func (c *Client) RetryTask(ctx context.Context, id, hint string) (*events.Task, error) {
	var body any
	if hint != "" {
		body = map[string]string{"hint": hint}
	}
	var out events.Task
	_, err := c.create(ctx, adminBase+"/tasks/"+url.PathEscape(id)+"/retry", body, &out)
	return &out, err
}
