package projections

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// UsageColumns are the counters of every llm_usage_* table, in UsageDelta
// order.
var UsageColumns = []string{"reports", "unpriced_reports", "input_tokens", "output_tokens",
	"cache_read_tokens", "cache_write_tokens", "cost_micro_usd"}

// UsageTable is one table of LLM usage totals.
type UsageTable struct {
	SumTable
	// KeyOf is the key's values for an event (nil: the event does not
	// count in this table).
	KeyOf func(e events.Envelope, p events.TaskUsageReported) []any
}

// usageSums is a usage table's SumTable.
func usageSums(name string, key, keySQL []string, only string) SumTable {
	return SumTable{Name: name, Events: []string{events.TaskUsageReported{}.EventType()}, Key: key, KeySQL: keySQL, Only: only,
		Columns: UsageColumns, SumsSQL: UsageDeltaSQL}
}

// UsageTables are the totals a usage event adds to: per task, per retry
// chain, per type and team day, per worker and team day.
var UsageTables = []UsageTable{
	{SumTable: usageSums("llm_usage_tasks", []string{"task_id"}, []string{"e.stream_id"}, ""),
		KeyOf: func(e events.Envelope, _ events.TaskUsageReported) []any { return []any{e.StreamID} }},
	{SumTable: usageSums("llm_usage_chains", []string{"root_task_id"}, []string{"(e.data->>'root_task_id')::uuid"}, ""),
		KeyOf: func(_ events.Envelope, p events.TaskUsageReported) []any { return []any{p.RootTaskID} }},
	{SumTable: usageSums("llm_usage_type_days", []string{"task_type_id", "day"},
		[]string{"(e.data->>'task_type_id')::uuid", "(e.data->>'day')::date"}, ""),
		KeyOf: func(_ events.Envelope, p events.TaskUsageReported) []any {
			return []any{p.TaskTypeID, p.Day}
		}},
	{SumTable: usageSums("llm_usage_worker_days", []string{"worker_id", "day"},
		[]string{"(e.data->>'worker_id')::uuid", "(e.data->>'day')::date"}, "e.data ? 'worker_id'"),
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

var addUsage = func() []string {
	out := make([]string, len(UsageTables))
	for i, t := range UsageTables {
		out[i] = t.AddSQL(t.Name)
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
