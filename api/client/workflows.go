package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

const workflowsBase = adminBase + "/workflows"

// NewWorkflow is a workflow to create: its tasks, each depending on others
// by ref.
type NewWorkflow struct {
	Name  string            `json:"name"`
	Tasks []NewWorkflowTask `json:"tasks"`
}

// NewWorkflowTask is one task of a NewWorkflow.
type NewWorkflowTask struct {
	Ref                 string          `json:"ref"`
	Title               string          `json:"title"`
	Description         string          `json:"description,omitempty"`
	TaskTypeID          string          `json:"task_type_id"`
	Params              json.RawMessage `json:"params,omitempty"`
	Priority            events.Priority `json:"priority,omitempty"`
	DependsOn           []string        `json:"depends_on,omitempty"`
	OnDependencyFailure string          `json:"on_dependency_failure,omitempty"`
}

// CreateWorkflow creates a workflow and all its tasks, or nothing.
func (c *Client) CreateWorkflow(ctx context.Context, w NewWorkflow) (*store.WorkflowView, error) {
	var out store.WorkflowView
	return &out, c.Do(ctx, http.MethodPost, workflowsBase, w, &out)
}

// Workflows lists workflows, newest first; after is the previous page's
// next_cursor, limit 0 the server's default.
func (c *Client) Workflows(ctx context.Context, after string, limit int) (*store.WorkflowPage, error) {
	v := url.Values{}
	if after != "" {
		v.Set("after", after)
	}
	if limit > 0 {
		v.Set("limit", fmt.Sprint(limit))
	}
	path := workflowsBase
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out store.WorkflowPage
	return &out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// Workflow reads a workflow with its tasks.
func (c *Client) Workflow(ctx context.Context, id string) (*store.WorkflowView, error) {
	var out store.WorkflowView
	return &out, c.Do(ctx, http.MethodGet, workflowsBase+"/"+url.PathEscape(id), nil, &out)
}

// CancelWorkflow cancels a workflow and its tasks that may still run.
func (c *Client) CancelWorkflow(ctx context.Context, id, reason string) (*store.WorkflowView, error) {
	var out store.WorkflowView
	return &out, c.Do(ctx, http.MethodPost, workflowsBase+"/"+url.PathEscape(id)+"/cancel", map[string]string{"reason": reason}, &out)
}

// ReleaseTask releases a blocked task from its dependencies: it becomes
// pending at once.
func (c *Client) ReleaseTask(ctx context.Context, id, reason string) (*events.Task, error) {
	var out events.Task
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/tasks/"+url.PathEscape(id)+"/release", map[string]string{"reason": reason}, &out)
}
