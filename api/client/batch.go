package client

import (
	"context"
	"encoding/json"
)

// MaxCreateTasks is the most tasks one CreateTasks call may carry.
const MaxCreateTasks = 1000

// CreatedItem is one task's answer in a batch: Status is the HTTP status
// the single creation would have answered (201, 200 for a duplicate
// answered with the task that holds its key, 4xx), ID the task's.
type CreatedItem struct {
	Status  int    `json:"status"`
	Success bool   `json:"success"`
	ID      string `json:"id,omitempty"`
	Error   *Error `json:"error,omitempty"`
}

// Err is the item's error, nil when it succeeded.
func (it CreatedItem) Err() error {
	if it.Success {
		return nil
	}
	e := &Error{Status: it.Status, Code: "unknown"}
	if it.Error != nil {
		*e = *it.Error
		e.Status = it.Status
	}
	return e
}

// CreatedBatch is the answer to CreateTasks.
type CreatedBatch struct {
	Created int           `json:"created"`
	Failed  int           `json:"failed"`
	Items   []CreatedItem `json:"items"`
}

// CreateTasks creates up to MaxCreateTasks tasks in one request and one
// transaction; each is checked on its own and answered in order. An error
// return means the whole request was refused (or no answer came) and
// nothing was created.
func (c *Client) CreateTasks(ctx context.Context, tasks []NewTask) (*CreatedBatch, error) {
	return c.CreateTasksRaw(ctx, tasksJSON(tasks))
}

// CreateTasksRaw is CreateTasks for tasks already in JSON (each an object
// as POST /tasks takes it), sent as they are.
func (c *Client) CreateTasksRaw(ctx context.Context, tasks []json.RawMessage) (*CreatedBatch, error) {
	var out CreatedBatch
	if _, err := c.create(ctx, adminBase+"/tasks/batch", map[string]any{"tasks": tasks}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func tasksJSON(tasks []NewTask) []json.RawMessage {
	out := make([]json.RawMessage, len(tasks))
	for i, t := range tasks {
		out[i], _ = json.Marshal(t) // NewTask always marshals
	}
	return out
}
