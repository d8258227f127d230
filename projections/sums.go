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
	// Events are the types of the events the table sums.
	Events []string
	Key    []string
	// KeySQL is Key's values as SQL expressions over a task_events row e.
	KeySQL []string
	// Only, when set, is the SQL condition an event must meet to count.
	Only string
	// Columns are the counters; SumsSQL the same as aggregates over e.
	Columns []string
	SumsSQL []string
	// Sharded tables have one row per key and server process (a pid
	// column after the key, 0 for rows replay writes), so that writers
	// adding to one hot key (the current minute) never wait for each
	// other; the key's totals are the sums of its rows.
	Sharded bool
}

// ConflictKey is the columns of the table's primary key.
func (t SumTable) ConflictKey() []string {
	if t.Sharded {
		return append(append([]string{}, t.Key...), "pid")
	}
	return t.Key
}

// SumTables are every table of totals replay rebuilds and verifies this way.
func SumTables() []SumTable {
	out := []SumTable{WorkerDayCompletions, TaskMinutes}
	for _, t := range UsageTables {
		out = append(out, t.SumTable)
	}
	return out
}

// AddSQL is the upsert that adds a delta to the row with the key, into the
// table named into (schema-qualified by replay); its parameters are the
// key's values, then the counters'.
func (t SumTable) AddSQL(into string) string {
	var cols, params []string
	for _, c := range t.Key {
		cols, params = append(cols, c), append(params, fmt.Sprintf("$%d", len(params)+1))
	}
	if t.Sharded {
		cols, params = append(cols, "pid"), append(params, "pg_backend_pid()")
	}
	for i, c := range t.Columns {
		cols, params = append(cols, c), append(params, fmt.Sprintf("$%d", len(t.Key)+i+1))
	}
	return fmt.Sprintf("INSERT INTO %s AS u (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s",
		into, strings.Join(cols, ", "), strings.Join(params, ", "), strings.Join(t.ConflictKey(), ", "), t.AddCounters("u"))
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
	Events:  []string{events.TaskCompleted{}.EventType()},
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

// TaskMinutes counts, per minute, the tasks completed, the tasks failed and
// the retries created, so the dashboard's last hour is sixty minutes of
// counters however busy the hour was.
var TaskMinutes = SumTable{
	Name:    "task_minutes",
	Events:  []string{events.TaskCompleted{}.EventType(), events.TaskFailed{}.EventType(), events.TaskCreated{}.EventType()},
	Key:     []string{"minute"},
	KeySQL:  []string{"date_trunc('minute', e.occurred_at)"},
	Only:    "(e.type <> 'task.created' OR (e.data->>'retry_count')::int > 0)",
	Columns: []string{"completed", "failed", "retries"},
	SumsSQL: []string{"count(*) FILTER (WHERE e.type = 'task.completed')", "count(*) FILTER (WHERE e.type = 'task.failed')",
		"count(*) FILTER (WHERE e.type = 'task.created')"},
	Sharded: true,
}

var addMinute = TaskMinutes.AddSQL(TaskMinutes.Name)

// queueMinute counts a completion, a failure or a retry's creation in its
// minute.
func queueMinute(b *pgx.Batch, e events.Envelope) {
	var d [3]int64
	switch p := e.Payload.(type) {
	case events.TaskCompleted:
		d[0] = 1
	case events.TaskFailed:
		d[1] = 1
	case events.TaskCreated:
		if p.RetryCount == 0 {
			return
		}
		d[2] = 1
	default:
		return
	}
	b.Queue(addMinute, e.OccurredAt.Truncate(time.Minute), d[0], d[1], d[2])
}
