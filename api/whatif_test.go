package api_test

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/whatif"
)

// A chain that exhausted its retries is reported as retried under a policy
// with one more; bad parameters are 400s naming the field; workers are
// refused; nothing is written.
func TestWhatIfReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	w := b.newWorker(t, "Wanda", 1)
	task := b.newTask(t, tt, "Quarterly report", events.PriorityHigh, "")
	claimed, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, claimed.ID)
	_, err = w.Fail(b.ctx, task.ID, "tests failed")
	require.NoError(t, err)
	_, _, err = b.db.UpdateTask(b.ctx, b.pool, task.ID, events.Meta{Actor: events.System("retry")},
		func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(0) })
	require.NoError(t, err)
	before := b.count(t, `SELECT count(*) FROM task_events`)

	get := func(q url.Values) (*whatif.Report, error) {
		var rep whatif.Report
		err := b.admin.Do(b.ctx, http.MethodGet, "/api/v1/admin/replay/what-if?"+q.Encode(), nil, &rep)
		return &rep, err
	}
	rep, err := get(url.Values{"since": {"1d"}, "policy": {`{"types": {"report": {"max_retries": 1}}}`}, "sample": {"5"}})
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Totals.Chains)
	require.Equal(t, int64(1), rep.Totals.Retried)
	require.Len(t, rep.Sample, 1)
	require.Equal(t, task.ID, rep.Sample[0].RootTaskID)
	require.Equal(t, "exhausted", rep.Sample[0].Recorded)
	require.Equal(t, "unknown", rep.Sample[0].Simulated)

	rep, err = get(url.Values{})
	require.NoError(t, err, "every parameter has a default")
	require.Zero(t, rep.Totals.Changed)

	for _, tc := range []struct {
		q     url.Values
		field string
	}{
		{url.Values{"policy": {`{"types": {"report": {"max_retries": -1}}}`}}, "types.report.max_retries"},
		{url.Values{"policy": {`{"types": {"nope": {"max_retries": 1}}}`}}, "types.nope"},
		{url.Values{"policy": {`{"worker_offline_after": "0s"}`}}, "worker_offline_after"},
		{url.Values{"policy": {`{"types": `}}, "policy"},
		{url.Values{"since": {"400d"}}, "since"},
		{url.Values{"sample": {"0"}}, "sample"},
		{url.Values{"sample": {""}}, "sample"},
		{url.Values{"since": {""}}, "since"},
	} {
		_, err := get(tc.q)
		var apiErr *client.Error
		require.True(t, errors.As(err, &apiErr), "%v: %v", tc.q, err)
		require.Equal(t, http.StatusBadRequest, apiErr.Status, "%v", tc.q)
		require.Equal(t, tc.field, apiErr.Field, "%v", tc.q)
	}
	err = w.Do(b.ctx, http.MethodGet, "/api/v1/admin/replay/what-if", nil, nil)
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, http.StatusForbidden, apiErr.Status)
	require.Equal(t, before, b.count(t, `SELECT count(*) FROM task_events`), "a what-if writes nothing")
}

// A window that needs longer than the API's budget is refused as too
// large, naming since, rather than cut off by the write timeout.
func TestWhatIfReplayBudget(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, func(c *api.Config) { c.WhatIfBudget = time.Nanosecond })
	err := b.admin.Do(b.ctx, http.MethodGet, "/api/v1/admin/replay/what-if?since=30d", nil, nil)
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusRequestEntityTooLarge, apiErr.Status)
	require.Equal(t, "too_large", apiErr.Code)
	require.Equal(t, "since", apiErr.Field)
}

// A window that holds more retry chains open at once than the cap is
// refused as too large, naming since, before memory grows with it.
func TestWhatIfReplayOpenChains(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, func(c *api.Config) { c.WhatIfMaxOpenChains = 1 })
	tt := b.newType(t, "report")
	for _, title := range []string{"one", "two"} {
		b.newTask(t, tt, title, events.PriorityHigh, "")
	}
	err := b.admin.Do(b.ctx, http.MethodGet, "/api/v1/admin/replay/what-if?since=1d", nil, nil)
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusRequestEntityTooLarge, apiErr.Status)
	require.Equal(t, "too_large", apiErr.Code)
	require.Equal(t, "since", apiErr.Field)
	require.Contains(t, apiErr.Message, "more than 1 retry chains open at once")
	require.Contains(t, apiErr.Message, "choose a shorter since")
}
