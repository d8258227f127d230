package projections

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// UsageColumns are the counters of every llm_usage_* table, in UsageDelta
// order.
var UsageColumns = []string{"reports", "unpriced_reports", "input_tokens", "output_tokens",
	"cache_read_tokens", "cache_write_tokens", "cost_micro_usd"}

// UsageTable is one table of LLM usage totals and the key its rows are
// counted under.
type UsageTable struct {
	Name string
	Key  []string
	// KeyOf is the key's values for an event (nil: the event does not
	// count in this table), and KeySQL the same as SQL expressions over a
	// task_events row e, for replay.
	KeyOf  func(e events.Envelope, p events.TaskUsageReported) []any
	KeySQL []string
	// Only, when set, is the SQL condition an event must meet to count.
	Only string
}

// UsageTables are the totals a usage event adds to: per task, per retry
// chain, per type and team day, per worker and team day.
var UsageTables = []UsageTable{
	{Name: "llm_usage_tasks", Key: []string{"task_id"}, KeySQL: []string{"e.stream_id"},
		KeyOf: func(e events.Envelope, _ events.TaskUsageReported) []any { return []any{e.StreamID} }},
	{Name: "llm_usage_chains", Key: []string{"root_task_id"}, KeySQL: []string{"(e.data->>'root_task_id')::uuid"},
		KeyOf: func(_ events.Envelope, p events.TaskUsageReported) []any { return []any{p.RootTaskID} }},
	{Name: "llm_usage_type_days", Key: []string{"task_type_id", "day"},
		KeySQL: []string{"(e.data->>'task_type_id')::uuid", "(e.data->>'day')::date"},
		KeyOf: func(_ events.Envelope, p events.TaskUsageReported) []any {
			return []any{p.TaskTypeID, p.Day}
		}},
	{Name: "llm_usage_worker_days", Key: []string{"worker_id", "day"},
		KeySQL: []string{"(e.data->>'worker_id')::uuid", "(e.data->>'day')::date"}, Only: "e.data ? 'worker_id'",
		KeyOf: func(_ events.Envelope, p events.TaskUsageReported) []any {
			if p.WorkerID == "" {
				return nil
			}
			return []any{p.WorkerID, p.Day}
		}},
}

// UsageDelta is what one usage event adds to each counter.
func UsageDelta(p events.TaskUsageReported) []any {
	unpriced := int64(0)
	if p.CostSource == events.CostUnpriced {
		unpriced = 1
	}
	return []any{int64(1), unpriced, p.InputTokens, p.OutputTokens, p.CacheReadTokens, p.CacheWriteTokens,
		events.MicroUSD(p.CostUSD)}
}

// UsageDeltaSQL is UsageDelta as aggregates over task_events rows e.
var UsageDeltaSQL = []string{
	"count(*)",
	"count(*) FILTER (WHERE e.data->>'cost_source' = '" + events.CostUnpriced + "')",
	"sum((e.data->>'input_tokens')::bigint)",
	"sum((e.data->>'output_tokens')::bigint)",
	"sum((e.data->>'cache_read_tokens')::bigint)",
	"sum((e.data->>'cache_write_tokens')::bigint)",
	"sum(round((e.data->>'cost_usd')::numeric * " + fmt.Sprint(events.UsageCostDecimal) + "))",
}

// AddUsageSQL is the upsert that adds a delta to the row with the key,
// into the table named into (schema-qualified by replay); its parameters
// are the key's values, then the counters'.
func (t UsageTable) AddUsageSQL(into string) string {
	cols := append(append([]string{}, t.Key...), UsageColumns...)
	params := make([]string, len(cols))
	for i := range cols {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return fmt.Sprintf("INSERT INTO %s AS u (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s",
		into, strings.Join(cols, ", "), strings.Join(params, ", "), strings.Join(t.Key, ", "), AddCounters("u"))
}

// AddCounters is the SET list that adds excluded's counters to alias's.
func AddCounters(alias string) string {
	sets := make([]string, len(UsageColumns))
	for i, c := range UsageColumns {
		sets[i] = fmt.Sprintf("%s = %s.%s + excluded.%s", c, alias, c, c)
	}
	return strings.Join(sets, ", ")
}

var addUsage = func() []string {
	out := make([]string, len(UsageTables))
	for i, t := range UsageTables {
		out[i] = t.AddUsageSQL(t.Name)
	}
	return out
}()

// queueUsage adds a usage event to every total it counts in.
func queueUsage(b *pgx.Batch, e events.Envelope) {
	p, ok := e.Payload.(events.TaskUsageReported)
	if !ok {
		return
	}
	delta := UsageDelta(p)
	for i, t := range UsageTables {
		key := t.KeyOf(e, p)
		if key == nil {
			continue
		}
		b.Queue(addUsage[i], append(key, delta...)...)
	}
}
