package client

import (
	"context"
	"net/http"

	"github.com/clawdbot/task-service/store"
)

// WorkerEdit is PUT /admin/workers/:id: nil leaves a field as it is.
type WorkerEdit struct {
	FullName           *string `json:"full_name,omitempty"`
	MaxConcurrentTasks *int    `json:"max_concurrent_tasks,omitempty"`
	IsAdmin            *bool   `json:"is_admin,omitempty"`
	IsWorker           *bool   `json:"is_worker,omitempty"`
}

// Worker reads one user (worker or admin) as admins see workers.
func (c *Client) Worker(ctx context.Context, id string) (*store.WorkerView, error) {
	var out store.WorkerView
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/"+id, nil, &out)
}

// UpdateWorker changes a user's name, capacity or roles.
func (c *Client) UpdateWorker(ctx context.Context, id string, e WorkerEdit) (*store.WorkerView, error) {
	var out store.WorkerView
	return &out, c.Do(ctx, http.MethodPut, adminBase+"/"+id, e, &out)
}

// DeactivateWorker deactivates a user and releases the tasks it holds.
func (c *Client) DeactivateWorker(ctx context.Context, id, reason string) (*store.WorkerView, error) {
	var out store.WorkerView
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/"+id+"/deactivate", map[string]string{"reason": reason}, &out)
}

// ReactivateWorker lets a deactivated user log in again.
func (c *Client) ReactivateWorker(ctx context.Context, id, reason string) (*store.WorkerView, error) {
	var out store.WorkerView
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/"+id+"/reactivate", map[string]string{"reason": reason}, &out)
}

// ResetPassword sets a user's password (as an admin).
func (c *Client) ResetPassword(ctx context.Context, id, password string) (*store.WorkerView, error) {
	var out store.WorkerView
	return &out, c.Do(ctx, http.MethodPost, adminBase+"/"+id+"/password", map[string]string{"password": password}, &out)
}

// ChangePassword changes the logged-in user's own password and keeps the
// new token it returns (the old one stops working).
func (c *Client) ChangePassword(ctx context.Context, current, next string) (*LoginResponse, error) {
	var out LoginResponse
	err := c.Do(ctx, http.MethodPost, "/api/v1/auth/password",
		map[string]string{"current_password": current, "new_password": next}, &out)
	if err == nil {
		c.SetToken(out.Token)
	}
	return &out, err
}
