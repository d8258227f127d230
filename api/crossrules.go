package api

import (
	"math"
	"time"

	"github.com/clawdbot/task-service/events"
)

// Rules across a request's fields, stated in the document (crossRules):
// each schema below matches a combination the server refuses with a 400.
// The handlers and events keep the checks themselves; the contract fuzz
// test holds the two in step.

// given is "field is present"; with a schema, "and matches it".
func given(field string, schema map[string]any) map[string]any {
	out := map[string]any{"required": []string{field}}
	if schema != nil {
		out["properties"] = map[string]any{field: schema}
	}
	return out
}

func allOf(parts ...map[string]any) map[string]any { return map[string]any{"allOf": parts} }
func not(part map[string]any) map[string]any       { return map[string]any{"not": part} }
func is(values ...any) map[string]any              { return map[string]any{"enum": values} }

// kindOnlyWhenFailed: kind with status completed.
func kindOnlyWhenFailed() []any {
	return []any{allOf(given("kind", nil), given("status", is("completed")))}
}

func (statusRequest) forbidden(docLimits) []any { return kindOnlyWhenFailed() }
func (finishItem) forbidden(docLimits) []any    { return kindOnlyWhenFailed() }

// dependencyFailureNeedsDependencies: on_dependency_failure without a
// depends_on that lists something.
func dependencyFailureNeedsDependencies() []any {
	return []any{allOf(given("on_dependency_failure", nil),
		not(given("depends_on", map[string]any{"minItems": 1})))}
}

func (createTaskRequest) forbidden(docLimits) []any {
	// unique_for is a window for a unique_key ("0s" alone passes too).
	return append(dependencyFailureNeedsDependencies(), allOf(given("unique_for", map[string]any{"minLength": 1}),
		not(given("unique_key", map[string]any{"minLength": 1}))))
}
func (workflowTaskRequest) forbidden(docLimits) []any { return dependencyFailureNeedsDependencies() }

// A concurrency key and its limit come together.
func (taskTypeRequest) forbidden(docLimits) []any {
	key := given("concurrency_key", map[string]any{"pattern": `\$`}) // a path, not spaces
	return []any{
		allOf(given("max_in_progress_per_key", nil), not(key)),
		allOf(key, not(given("max_in_progress_per_key", nil))),
	}
}

// A bulk action needs a filter with a criterion; a cancel a reason (but
// for a dry run); a retry's hint is shorter than a reason.
func (BulkTasksRequest) forbidden(docLimits) []any {
	var criteria []any
	for _, f := range []string{"status", "task_type_id", "priority", "assigned_to"} {
		criteria = append(criteria, given(f, nil))
	}
	for _, f := range []string{"unassigned", "retries", "stuck"} {
		criteria = append(criteria, given(f, is(true)))
	}
	criteria = append(criteria, given("q", map[string]any{"pattern": nonBlankPattern}))
	return []any{
		given("filter", not(map[string]any{"anyOf": criteria})),
		allOf(given("action", is("cancel")), not(given("dry_run", is(true))),
			not(given("reason", map[string]any{"pattern": nonBlankPattern}))),
		allOf(given("action", is("retry")), given("reason", map[string]any{"minLength": maxRetryHint + 1})),
	}
}

// An account is an admin, a worker or both.
func (createWorkerRequest) forbidden(docLimits) []any {
	return []any{allOf(given("is_worker", is(false)), not(given("is_admin", is(true))))}
}

func (updateWorkerRequest) forbidden(docLimits) []any {
	return []any{allOf(given("is_worker", is(false)), given("is_admin", is(false)))}
}

// A schedule has an interval or a cron expression, not both; with neither
// it runs once, at start_at; an interval is at least the server's
// shortest (SCHEDULE_MIN_INTERVAL, a setting).
func (ScheduleRequest) forbidden(l docLimits) []any {
	return append(scheduleTimingRules(l), allOf(not(given("interval", nil)), not(given("cron", map[string]any{"minLength": 1})), not(given("start_at", nil))))
}

func (ScheduleEdit) forbidden(l docLimits) []any { return scheduleTimingRules(l) }

func scheduleTimingRules(l docLimits) []any {
	out := []any{allOf(given("interval", nil), given("cron", map[string]any{"minLength": 1}))}
	min := l.scheduleMinInterval
	if min <= 0 {
		min = events.DefaultMinInterval
	}
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{events.UnitSeconds, time.Second}, {events.UnitMinutes, time.Minute}, {events.UnitHours, time.Hour}, {events.UnitDays, 24 * time.Hour}} {
		least := int(math.Ceil(float64(min) / float64(u.d)))
		if least > 1 {
			out = append(out, given("interval", map[string]any{
				"required":   []string{"unit", "every"},
				"properties": map[string]any{"unit": is(u.unit), "every": map[string]any{"maximum": least - 1}}}))
		}
	}
	return out
}

// A create names its rule: an edit leaves an empty name as it was.
func (FreshnessRuleRequest) forbidden(docLimits) []any {
	return []any{given("name", not(map[string]any{"pattern": nonBlankPattern}))}
}

// What a create needs that an edit, sharing the fields, leaves out.
func (ScheduleRequest) createNeeds() []string { return []string{"task"} }
func (FreshnessRuleRequest) createNeeds() []string {
	return []string{"max_age", "name", "task_type_id"}
}
