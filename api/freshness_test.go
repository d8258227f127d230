package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

const tickerSchema = `{"type":"object","properties":{"ticker":{"type":"string","maxLength":8}},"required":["ticker"]}`

func (b *bundle) tickerType(t *testing.T, name string) *events.TaskType {
	t.Helper()
	tt, err := b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: name, Label: "Crawl", SOP: "1. Crawl",
		ParamSchema: json.RawMessage(tickerSchema)})
	require.NoError(t, err)
	return tt
}

// The freshness rules API on one server: create, list, get, edit, keys
// replaced and listed, pause, resume, delete; the scheduler's look (moved by
// the test clock) creates one task per stale key at the weight's priority,
// and a completion resets the key's age. Every answer is checked against
// the OpenAPI document.
func TestFreshnessRulesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.tickerType(t, "reddit_crawl")
	r, err := b.admin.CreateFreshnessRule(ctx, client.NewFreshnessRule{Name: "watchlist", TaskTypeID: tt.ID,
		TitleTemplate: "Reddit crawl for {{key}}", ParamsTemplate: `{"ticker": "{{key}}"}`, MaxAge: "6h",
		Keys: []events.FreshnessKey{{Key: "NVDA", Weight: 5}, {Key: "INTC", Weight: 1}, {Key: "AMD", Weight: 1, Rising: true}}})
	require.NoError(t, err)
	require.Equal(t, events.FreshnessActive, r.State)
	require.Equal(t, 3, r.KeyCount)
	require.EqualValues(t, 6*3600, r.MaxAgeSeconds)
	require.Equal(t, events.DefaultThresholds, r.Thresholds)

	list, err := b.admin.FreshnessRules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	got, err := b.admin.FreshnessRule(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, "watchlist", got.Name)

	// Every key is due at once (never completed): one task each.
	check := api.NewParamsCheck()
	ds, err := b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	prio := map[string]events.Priority{}
	for _, d := range ds {
		prio[d.Key] = d.Priority
	}
	require.Equal(t, map[string]events.Priority{"NVDA": events.PriorityHigh, "INTC": events.PriorityLow, "AMD": events.PriorityMedium}, prio)
	again, err := b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Empty(t, again, "a key with an open task gets no second one")

	keys, err := b.admin.FreshnessKeys(ctx, r.ID, "", 2)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "AMD", keys[0].Key)
	require.NotNil(t, keys[0].CurrentTaskID)
	require.Nil(t, keys[0].DueAt)
	rest, err := b.admin.FreshnessKeys(ctx, r.ID, keys[1].Key, 0)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Equal(t, "NVDA", rest[0].Key)

	// NVDA's task completes: due again 6 h later, then high priority.
	w := b.newWorker(t, "Genesis", 5)
	task, err := b.admin.Task(ctx, *rest[0].CurrentTaskID)
	require.NoError(t, err)
	require.Equal(t, "Reddit crawl for NVDA", task.Title)
	require.JSONEq(t, `{"ticker":"NVDA"}`, string(task.Params))
	require.Equal(t, events.PriorityHigh, task.Priority)
	claimUntil(t, b, w, task.ID)
	_, err = w.Complete(ctx, task.ID)
	require.NoError(t, err)
	nvda, err := b.admin.FreshnessKeys(ctx, r.ID, "INTC", 1)
	require.NoError(t, err)
	require.Nil(t, nvda[0].CurrentTaskID)
	require.NotNil(t, nvda[0].LastCompletedAt)
	require.WithinDuration(t, nvda[0].LastCompletedAt.Add(6*time.Hour), *nvda[0].DueAt, time.Millisecond)
	ds, err = b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Empty(t, ds, "completed just now: not stale")
	// INTC's task fails (no retry here: no reactors run): the key waits a
	// max age after that end, not a look.
	intc, err := b.admin.FreshnessKeys(ctx, r.ID, "AMD", 1)
	require.NoError(t, err)
	require.Equal(t, "INTC", intc[0].Key)
	claimUntil(t, b, w, *keys[1].CurrentTaskID)
	failed, err := w.Fail(ctx, *keys[1].CurrentTaskID, "rate limited")
	require.NoError(t, err)
	intc, err = b.admin.FreshnessKeys(ctx, r.ID, "AMD", 1)
	require.NoError(t, err)
	require.Nil(t, intc[0].CurrentTaskID)
	require.Nil(t, intc[0].LastCompletedAt)
	require.WithinDuration(t, *failed.CompletedAt, *intc[0].LastFailedAt, time.Millisecond)
	require.WithinDuration(t, failed.CompletedAt.Add(6*time.Hour), *intc[0].DueAt, time.Millisecond)
	ds, err = b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Empty(t, ds, "a key whose task just failed waits a max age")
	b.clock.offset.Add(int64(7*time.Hour + 12*time.Minute))
	ds, err = b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	if ds[0].Key != "NVDA" {
		ds[0], ds[1] = ds[1], ds[0]
	}
	require.Equal(t, "INTC", ds[1].Key)
	require.Equal(t, "INTC: never completed; weight 1 → low", ds[1].Reason)
	require.Equal(t, "NVDA", ds[0].Key)
	require.Equal(t, events.PriorityHigh, ds[0].Priority)
	require.Equal(t, "NVDA: last completed 7h12m ago > 6h; weight 5 × staleness 1.20 = 6.0 → high", ds[0].Reason)

	// The decisions are events of the rule's stream, saying why.
	rows, err := b.pool.Query(ctx, `SELECT data->>'reason' FROM task_events
		WHERE stream_id = $1 AND type = 'freshness_rule.task_created' ORDER BY seq`, r.ID)
	require.NoError(t, err)
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, reasons, 5)
	require.Contains(t, reasons, ds[0].Reason)
	require.Equal(t, "NVDA: never completed; weight 5 → high", reasons[2])

	// Edit, keys, pause, resume, delete.
	edited, err := b.admin.UpdateFreshnessRule(ctx, r.ID, client.NewFreshnessRule{MaxAge: "12h",
		Thresholds: &events.PriorityThresholds{Urgent: 100, High: 50, Medium: 10}})
	require.NoError(t, err)
	require.EqualValues(t, 12*3600, edited.MaxAgeSeconds)
	require.Equal(t, "Reddit crawl for {{key}}", edited.TitleTemplate)
	replaced, err := b.admin.ReplaceFreshnessKeys(ctx, r.ID, []events.FreshnessKey{{Key: "NVDA", Weight: 9}, {Key: "TSLA", Weight: 2}})
	require.NoError(t, err)
	require.Equal(t, 2, replaced.KeyCount)
	all, err := b.admin.FreshnessKeys(ctx, r.ID, "", 0)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, 9, all[0].Weight)
	require.NotNil(t, all[0].CurrentTaskID, "a kept key keeps its state")
	require.NotNil(t, all[1].DueAt, "a new key is due at once")
	paused, err := b.admin.FreshnessRuleAction(ctx, r.ID, "pause", "market closed")
	require.NoError(t, err)
	require.Equal(t, events.FreshnessPaused, paused.State)
	ds, err = b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Empty(t, ds, "a paused rule creates nothing")
	_, err = b.admin.FreshnessRuleAction(ctx, r.ID, "pause", "")
	requireAPIError(t, err, http.StatusConflict, "invalid_transition", "")
	resumed, err := b.admin.FreshnessRuleAction(ctx, r.ID, "resume", "")
	require.NoError(t, err)
	require.Equal(t, events.FreshnessActive, resumed.State)
	ds, err = b.db.CreateStaleTasks(ctx, 100, check)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "TSLA", ds[0].Key)
	deleted, err := b.admin.DeleteFreshnessRule(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, r.ID, deleted.ID)
	_, err = b.admin.FreshnessRule(ctx, r.ID)
	requireAPIError(t, err, http.StatusNotFound, "not_found", "")
}

// Bad input is a 400 naming the field, and changes nothing.
func TestFreshnessRulesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.tickerType(t, "crawl")
	good := func() client.NewFreshnessRule {
		return client.NewFreshnessRule{Name: "w", TaskTypeID: tt.ID, TitleTemplate: "Crawl {{key}}",
			ParamsTemplate: `{"ticker": "{{key}}"}`, MaxAge: "6h", Keys: []events.FreshnessKey{{Key: "NVDA", Weight: 5}}}
	}
	many := make([]events.FreshnessKey, events.MaxFreshnessKeys+1)
	for i := range many {
		many[i] = events.FreshnessKey{Key: fmt.Sprint("K", i), Weight: 1}
	}
	for name, tc := range map[string]struct {
		edit  func(*client.NewFreshnessRule)
		field string
	}{
		"template does not parse": {func(r *client.NewFreshnessRule) { r.ParamsTemplate = `{"ticker": "{{key"}` }, "params_template"},
		"template not JSON":       {func(r *client.NewFreshnessRule) { r.ParamsTemplate = `{"ticker": {{key}}}` }, "params_template"},
		"unknown placeholder":     {func(r *client.NewFreshnessRule) { r.TitleTemplate = "Crawl {{sub}}" }, "title_template"},
		"schema refuses":          {func(r *client.NewFreshnessRule) { r.ParamsTemplate = `{"ticker": 1}` }, "params_template"},
		"negative age":            {func(r *client.NewFreshnessRule) { r.MaxAge = "-6h" }, "max_age"},
		"zero age":                {func(r *client.NewFreshnessRule) { r.MaxAge = "0s" }, "max_age"},
		"too short an age":        {func(r *client.NewFreshnessRule) { r.MaxAge = "5s" }, "max_age"},
		"absurd age":              {func(r *client.NewFreshnessRule) { r.MaxAge = "100000h" }, "max_age"},
		"not an age":              {func(r *client.NewFreshnessRule) { r.MaxAge = "soon" }, "max_age"},
		"weight out of range":     {func(r *client.NewFreshnessRule) { r.Keys[0].Weight = 101 }, "keys[0].weight"},
		"zero weight":             {func(r *client.NewFreshnessRule) { r.Keys[0].Weight = 0 }, "keys[0].weight"},
		"key too long":            {func(r *client.NewFreshnessRule) { r.Keys[0].Key = strings.Repeat("x", 151) }, "keys[0].key"},
		"key twice":               {func(r *client.NewFreshnessRule) { r.Keys = append(r.Keys, r.Keys[0]) }, "keys[1].key"},
		"key the schema refuses":  {func(r *client.NewFreshnessRule) { r.Keys[0].Key = "TOOLONGTICKER" }, "keys[0].key"},
		"too many keys":           {func(r *client.NewFreshnessRule) { r.Keys = many }, "keys"},
		"thresholds fall": {func(r *client.NewFreshnessRule) {
			r.Thresholds = &events.PriorityThresholds{Urgent: 1, High: 5, Medium: 2}
		}, "thresholds.urgent"}, // the one that falls (x-at-least high)
		"boost below 1": {func(r *client.NewFreshnessRule) { r.RisingBoost = 0.5 }, "rising_boost"},
	} {
		r := good()
		tc.edit(&r)
		_, err := b.admin.CreateFreshnessRule(ctx, r)
		requireAPIError(t, err, http.StatusBadRequest, "validation_failed", tc.field)
		require.NotEmpty(t, name)
	}
	// A rule for a type that is not there is well-formed, and refused as such.
	unknownType := good()
	unknownType.TaskTypeID = "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a"
	_, err := b.admin.CreateFreshnessRule(ctx, unknownType)
	requireAPIError(t, err, http.StatusUnprocessableEntity, "unknown_reference", "task_type_id")
	list, err := b.admin.FreshnessRules(ctx)
	require.NoError(t, err)
	require.Empty(t, list, "nothing was created")

	r, err := b.admin.CreateFreshnessRule(ctx, good())
	require.NoError(t, err)
	_, err = b.admin.ReplaceFreshnessKeys(ctx, r.ID, []events.FreshnessKey{{Key: "AMD", Weight: -1}})
	requireAPIError(t, err, http.StatusBadRequest, "validation_failed", "keys[0].weight")
	_, err = b.admin.UpdateFreshnessRule(ctx, r.ID, client.NewFreshnessRule{MaxAge: "-1h"})
	requireAPIError(t, err, http.StatusBadRequest, "validation_failed", "max_age")
	other := b.tickerType(t, "other")
	_, err = b.admin.UpdateFreshnessRule(ctx, r.ID, client.NewFreshnessRule{TaskTypeID: other.ID})
	requireAPIError(t, err, http.StatusBadRequest, "validation_failed", "task_type_id")
	after, err := b.admin.FreshnessRule(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, r.Version, after.Version, "nothing changed")
	keys, err := b.admin.FreshnessKeys(ctx, r.ID, "", 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "NVDA", keys[0].Key)
}

// claimUntil has w claim tasks in queue order until it holds id.
func claimUntil(t *testing.T, b *bundle, w *worker, id string) {
	t.Helper()
	for range 5 {
		got, err := w.Claim(b.ctx)
		require.NoError(t, err)
		require.NotNil(t, got, "the queue ran out before %s", id)
		if got.ID == id {
			return
		}
	}
	t.Fatalf("%s was not claimed", id)
}
