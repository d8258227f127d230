package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// ReportUsage adds one attempt's LLM usage to the task the worker holds.
func (c *Client) ReportUsage(ctx context.Context, id string, u events.UsageReport) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/usage", u, &out)
}

// FinishWithUsage completes (or, with a reason, fails) the task and reports
// its LLM usage in the same command.
func (c *Client) FinishWithUsage(ctx context.Context, id string, status events.Status, reason string, u events.UsageReport) (*events.Task, error) {
	var out events.Task
	body := map[string]any{"status": status, "usage": u}
	if reason != "" {
		body["reason"] = reason
	}
	return &out, c.Do(ctx, http.MethodPut, "/api/v1/worker/tasks/"+url.PathEscape(id)+"/status", body, &out)
}

// TaskLLMUsage reads a task's LLM usage and its retry chain's.
func (c *Client) TaskLLMUsage(ctx context.Context, id string) (*store.TaskUsage, error) {
	var out store.TaskUsage
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/tasks/"+url.PathEscape(id)+"/usage", nil, &out)
}

// LLMUsageToday reads today's LLM usage per task type, against budgets.
func (c *Client) LLMUsageToday(ctx context.Context) ([]store.TypeDayUsage, error) {
	var out []store.TypeDayUsage
	return out, c.Do(ctx, http.MethodGet, "/api/v1/admin/llm-usage", nil, &out)
}
