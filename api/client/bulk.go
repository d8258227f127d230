package client

import (
	"context"
	"net/http"
)

// TaskFilter is the task list's filter as POST /tasks/bulk takes it (the
// same criteria as TaskQuery, and the title search and stuck of the UI).
type TaskFilter struct {
	Status     string `json:"status,omitempty"`
	TaskTypeID string `json:"task_type_id,omitempty"`
	Priority   string `json:"priority,omitempty"`
	AssignedTo string `json:"assigned_to,omitempty"`
	Unassigned bool   `json:"unassigned,omitempty"`
	Retries    bool   `json:"retries,omitempty"`
	Stuck      bool   `json:"stuck,omitempty"`
	Q          string `json:"q,omitempty"`
}

// BulkRequest asks to cancel or retry every task Filter matches, or with
// DryRun only to count them. After continues from a NextCursor.
type BulkRequest struct {
	Action string     `json:"action"` // cancel or retry
	Filter TaskFilter `json:"filter"`
	Reason string     `json:"reason,omitempty"`
	DryRun bool       `json:"dry_run,omitempty"`
	After  string     `json:"after,omitempty"`
	Limit  int        `json:"limit,omitempty"`
}

// BulkSkip is a task a bulk action passed over, with why.
type BulkSkip struct {
	ID      string `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BulkResult is one bulk request's answer. A dry run sets Matching (at
// least that many when MatchingAtLeast); a run sets Done and Skipped, and
// NextCursor when more tasks may match.
type BulkResult struct {
	Action          string     `json:"action"`
	DryRun          bool       `json:"dry_run"`
	Matching        int        `json:"matching"`
	MatchingAtLeast bool       `json:"matching_at_least"`
	Done            int        `json:"done"`
	Skipped         int        `json:"skipped"`
	Skips           []BulkSkip `json:"skips"`
	NextCursor      string     `json:"next_cursor,omitempty"`
}

// BulkTasks sends one bulk request (at most 1,000 tasks are acted on; go on
// with NextCursor as After).
func (c *Client) BulkTasks(ctx context.Context, req BulkRequest) (*BulkResult, error) {
	var out BulkResult
	if err := c.Do(ctx, http.MethodPost, adminBase+"/tasks/bulk", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BulkAll runs req until no task remains, calling progress after each
// request with the totals so far. The walk never comes back to a task:
// tasks created meanwhile (newer than the first) are left alone.
func (c *Client) BulkAll(ctx context.Context, req BulkRequest, progress func(total BulkResult)) (*BulkResult, error) {
	req.DryRun = false
	total := BulkResult{Action: req.Action, Skips: []BulkSkip{}}
	for {
		res, err := c.BulkTasks(ctx, req)
		if err != nil {
			return &total, err
		}
		total.Matching += res.Matching
		total.Done += res.Done
		total.Skipped += res.Skipped
		for _, s := range res.Skips {
			if len(total.Skips) < 10 {
				total.Skips = append(total.Skips, s)
			}
		}
		if progress != nil {
			progress(total)
		}
		if res.NextCursor == "" {
			return &total, nil
		}
		req.After = res.NextCursor
	}
}
