package projections

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// SumTable is a table of totals over many streams (a retry chain, a
// worker's day): the writers add to it in the statements that append the
// events it counts, and replay sums those events in SQL, where each event's
// data already says where it counts.
type SumTable struct {
	Name string
	// Event is the type of the events the table sums.
	Event string
	Key   []string
	// KeySQL is Key's values as SQL expressions over a task_events row e.
	KeySQL []string
	// Only, when set, is the SQL condition an event must meet to count.
	Only string
	// Columns are the counters; SumsSQL the same as aggregates over e.
	Columns []string
	SumsSQL []string
}

// SumTables are every table of totals replay rebuilds and verifies this way.
func SumTables() []SumTable {
	out := []SumTable{WorkerDayCompletions}
	for _, t := range UsageTables {
		out = append(out, t.SumTable)
	}
	return out
}

// AddSQL is the upsert that adds a delta to the row with the key, into the
// table named into (schema-qualified by replay); its parameters are the
// key's values, then the counters'.
func (t SumTable) AddSQL(into string) string {
	cols := append(append([]string{}, t.Key...), t.Columns...)
	params := make([]string, len(cols))
	for i := range cols {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return fmt.Sprintf("INSERT INTO %s AS u (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s",
		into, strings.Join(cols, ", "), strings.Join(params, ", "), strings.Join(t.Key, ", "), t.AddCounters("u"))
}

// AddCounters is the SET list that adds excluded's counters to alias's.
func (t SumTable) AddCounters(alias string) string {
	sets := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		sets[i] = fmt.Sprintf("%s = %s.%s + excluded.%s", c, alias, c, c)
	}
	return strings.Join(sets, ", ")
}

// WorkerDayCompletions counts each worker's completed tasks per UTC day, so
// "completed today" is one row per worker however busy the day was.
var WorkerDayCompletions = SumTable{
	Name:    "worker_day_completions",
	Event:   events.TaskCompleted{}.EventType(),
	Key:     []string{"worker_id", "day"},
	KeySQL:  []string{"(e.data->>'worker_id')::uuid", "(e.occurred_at AT TIME ZONE 'UTC')::date"},
	Columns: []string{"completed"},
	SumsSQL: []string{"count(*)"},
}

var addWorkerDay = WorkerDayCompletions.AddSQL(WorkerDayCompletions.Name)

// queueWorkerDay counts a completion in its worker's day.
func queueWorkerDay(b *pgx.Batch, e events.Envelope) {
	if p, ok := e.Payload.(events.TaskCompleted); ok {
		b.Queue(addWorkerDay, p.WorkerID, UTCDay(e.OccurredAt), int64(1))
	}
}

// UTCDay is the day a time counts in, as worker_day_completions keys it.
func UTCDay(t time.Time) time.Time {
	return t.UTC().Truncate(24 * time.Hour)
}
