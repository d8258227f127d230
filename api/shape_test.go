package api

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// The shape validator answers as the handlers did: the JSON path at fault
// and a message, for what the tags state, through decode.
func TestShapeValidator(t *testing.T) {
	task := func(extra string) string {
		return `{"ref":"r","title":"T","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a"` + extra + `}`
	}
	four := task("") + "," + task("") + "," + task("") + ","
	cases := []struct {
		name, body, field, message string
		into                       any
	}{
		{"an item's list item", `{"title":"T","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","depends_on":["0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","x"]}`,
			"depends_on[1]", "must be a UUID", &createTaskRequest{}},
		{"a list of objects", `{"name":"W","tasks":[` + four + task(`,"title":"  "`) + `]}`, "tasks[3].title", "not only white space", &createWorkflowRequest{}},
		{"characters, not bytes", `{"title":"` + strings.Repeat("é", 501) + `","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a"}`,
			"title", "longer than 500 characters", &createTaskRequest{}},
		{"an enum", `{"title":"T","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","on_duplicate":"maybe"}`, "on_duplicate", "one of error, existing", &createTaskRequest{}},
		{"a required pointer", `{"wait":1}`, "max", "is required", &claimManyRequest{}},
		{"a bound", `{"max":101}`, "max", "from 1 to 100", &claimManyRequest{}},
		{"a nested pattern and duration", `{"name":"t","rate_limit":{"count":1,"per":"1.5s"}}`, "rate_limit.per", "whole seconds", &taskTypeRequest{}},
		{"a sibling", `{"task":{"task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","title":"T"},"cron":"@daily","start_at":"2026-01-02T00:00:00Z","end_at":"2026-01-01T00:00:00Z"}`,
			"end_at", "after start_at", &ScheduleRequest{}},
		{"a format", `{"task":{"task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","title":"T"},"cron":"every day"}`, "cron", "not a cron expression", &ScheduleRequest{}},
		{"a time zone", `{"task":{"task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","title":"T"},"cron":"@daily","time_zone":"Mars/Olympus"}`, "time_zone", "unknown time zone", &ScheduleRequest{}},
		{"an exclusive bound", `{"thresholds":{"urgent":3,"high":2,"medium":-1}}`, "thresholds.medium", "above 0", &FreshnessRuleRequest{}},
		{"rising thresholds", `{"thresholds":{"urgent":1,"high":2,"medium":1}}`, "thresholds.urgent", "at least high", &FreshnessRuleRequest{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := decodeRaw([]byte(c.body), c.into, false)
			var ve *events.ValidationError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, c.field, ve.Field)
			require.Contains(t, ve.Message, c.message)
		})
	}
	// What the document allows passes.
	require.NoError(t, decodeRaw([]byte(`{"max":100,"wait":60}`), &claimManyRequest{}, false))
	require.NoError(t, decodeRaw([]byte(`{"name":"W","tasks":[`+four+task("")+`]}`), &createWorkflowRequest{}, false))
}

// One check per type, compiled once.
func TestShapeValidatorIsCompiledOnce(t *testing.T) {
	var req createTaskRequest
	require.Error(t, validateShape(&req), "a title is required") // compiles it
	first, found := shapeChecks.Load(reflectTypeOf(&req))
	require.True(t, found)
	require.Error(t, validateShape(&req))
	again, _ := shapeChecks.Load(reflectTypeOf(&req))
	require.Equal(t, funcID(first), funcID(again))
}

func reflectTypeOf(v any) reflect.Type { return reflect.TypeOf(v) }

func funcID(v any) uintptr { return reflect.ValueOf(v).Pointer() }

// TestScheduleTemplateEditMatchesItsTemplate keeps an edit's task fields
// those of the template it edits, with the same rules.
func TestScheduleTemplateEditMatchesItsTemplate(t *testing.T) {
	fields := func(v any) map[string]string {
		out := map[string]string{}
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			rules := parseRules(f.Tag.Get("openapi"))
			delete(rules, "required")
			out[name] = fmt.Sprint(rules)
		}
		return out
	}
	require.Equal(t, fields(events.ScheduleTemplate{}), fields(ScheduleTemplateEdit{}))
}
