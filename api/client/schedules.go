package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

const schedulesBase = "/api/v1/admin/schedules"

// NewSchedule is the body of createSchedule.
type NewSchedule struct {
	Name        string                  `json:"name,omitempty"`
	Task        events.ScheduleTemplate `json:"task"`
	Interval    *events.Interval        `json:"interval,omitempty"`
	Cron        string                  `json:"cron,omitempty"`
	TimeZone    string                  `json:"time_zone,omitempty"`
	StartAt     *time.Time              `json:"start_at,omitempty"`
	EndAt       *time.Time              `json:"end_at,omitempty"`
	MaxRuns     int                     `json:"max_runs,omitempty"`
	Overlap     string                  `json:"overlap,omitempty"`
	MaxFailures *int                    `json:"max_failures,omitempty"`
}

// ScheduleRun is what runSchedule answers.
type ScheduleRun struct {
	Schedule *events.Schedule `json:"schedule"`
	Task     *events.Task     `json:"task"`
}

// ExecutionPage is one page of executions.
type ExecutionPage struct {
	Executions []store.Execution `json:"executions"`
	NextBefore *int              `json:"next_before"`
}

// ScheduleQuery filters ListSchedules.
type ScheduleQuery struct {
	State, TaskTypeID, After string
	Limit                    int
}

// CreateSchedule defines a schedule.
func (c *Client) CreateSchedule(ctx context.Context, s NewSchedule) (*events.Schedule, error) {
	var out events.Schedule
	_, err := c.create(ctx, schedulesBase, s, &out)
	return &out, err
}

// UpdateSchedule edits a schedule: the fields given replace the current ones.
func (c *Client) UpdateSchedule(ctx context.Context, id string, fields map[string]any) (*events.Schedule, error) {
	var out events.Schedule
	return &out, c.Do(ctx, http.MethodPut, schedulesBase+"/"+url.PathEscape(id), fields, &out)
}

// Schedules lists schedules, newest first.
func (c *Client) Schedules(ctx context.Context, q ScheduleQuery) ([]events.Schedule, error) {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "task_type_id": q.TaskTypeID, "after": q.After} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	path := schedulesBase
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []events.Schedule
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// Schedule reads one schedule.
func (c *Client) Schedule(ctx context.Context, id string) (*events.Schedule, error) {
	var out events.Schedule
	return &out, c.Do(ctx, http.MethodGet, schedulesBase+"/"+url.PathEscape(id), nil, &out)
}

// ScheduleAction runs pause, resume or cancel (reason for pause and cancel).
func (c *Client) ScheduleAction(ctx context.Context, id, action, reason string) (*events.Schedule, error) {
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	var out events.Schedule
	return &out, c.Do(ctx, http.MethodPost, schedulesBase+"/"+url.PathEscape(id)+"/"+url.PathEscape(action), body, &out)
}

// RunSchedule fires an extra execution now.
func (c *Client) RunSchedule(ctx context.Context, id string) (*ScheduleRun, error) {
	var out ScheduleRun
	_, err := c.create(ctx, schedulesBase+"/"+url.PathEscape(id)+"/run", nil, &out)
	return &out, err
}

// ScheduleExecutions reads a page of executions, newest first (before 0: the first page).
func (c *Client) ScheduleExecutions(ctx context.Context, id string, before, limit int) (*ExecutionPage, error) {
	v := url.Values{}
	if before > 0 {
		v.Set("before", fmt.Sprint(before))
	}
	if limit > 0 {
		v.Set("limit", fmt.Sprint(limit))
	}
	path := schedulesBase + "/" + url.PathEscape(id) + "/executions"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out ExecutionPage
	return &out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// ScheduleStats reads a schedule's stats.
func (c *Client) ScheduleStats(ctx context.Context, id string) (*store.ScheduleStats, error) {
	var out store.ScheduleStats
	return &out, c.Do(ctx, http.MethodGet, schedulesBase+"/"+url.PathEscape(id)+"/stats", nil, &out)
}

// ScheduleMetrics reads the scheduler's metrics.
func (c *Client) ScheduleMetrics(ctx context.Context) (*store.ScheduleMetrics, error) {
	var out store.ScheduleMetrics
	return &out, c.Do(ctx, http.MethodGet, schedulesBase+"/metrics", nil, &out)
}
