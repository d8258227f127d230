package projections

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// NewTasks queues the writes of tasks being created, however many: one
// multi-row insert into worker_tasks, one into task_titles, one change of
// task_counts for them all, and the assignment rows of those assigned at
// once. Each task's rows are exactly those Task writes for it (a test
// checks both ways against replay), at a cost that hardly grows with the
// number of tasks: a statement per table, not per task (ADR 018).
func (Projector) NewTasks(b *pgx.Batch, tasks []*events.Task, evs []events.Envelope) error {
	if len(tasks) == 0 {
		return nil
	}
	rows, err := rowsJSON(TaskColumns, tasks, TaskRow, map[string]bool{"params": true, "result": true})
	if err != nil {
		return err
	}
	b.Queue(insertTasks, rows)
	titles, err := rowsJSON(TitleColumns, tasks, TitleRow, nil)
	if err != nil {
		return err
	}
	b.Queue(insertTitles, titles)
	var d Counts
	for _, t := range tasks {
		d.Add(t, 1)
	}
	args := make([]any, len(d))
	for i, v := range d {
		args[i] = v
	}
	b.Queue(addCounts, args...)
	for _, e := range evs {
		queueTaskAssignment(b, e)
	}
	for _, t := range tasks {
		queueKeyTask(b, nil, t)
	}
	return nil
}

// insertRows inserts the rows of a JSON array of objects keyed by column:
// json_populate_recordset converts each value to its column's type, so one
// statement of fixed text serves any number of rows.
func insertRows(table string, cols []string) string {
	list := strings.Join(cols, ", ")
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM json_populate_recordset(NULL::%s, $1::json)", table, list, list, table)
}

var (
	insertTasks  = insertGatedRows()
	insertTitles = insertRows("task_titles", TitleColumns)
)

// insertGatedRows is insertRows for worker_tasks, each row's gate read from
// its type FOR KEY SHARE, as insertTask does for one task (DESIGN §13). A
// missing type leaves gated NULL, which the column refuses.
func insertGatedRows() string {
	cols := make([]string, len(TaskColumns))
	for i, c := range TaskColumns {
		cols[i] = "r." + c
	}
	return fmt.Sprintf(`WITH r AS MATERIALIZED (SELECT * FROM json_populate_recordset(NULL::worker_tasks, $1::json)),
tt AS MATERIALIZED (
    SELECT id, gated, concurrency_key_path FROM task_types WHERE id IN (SELECT task_type_id FROM r) ORDER BY id FOR KEY SHARE)
INSERT INTO worker_tasks (%s, gated, concurrency_key)
SELECT %s, tt.gated, CASE WHEN tt.gated THEN %s END FROM r LEFT JOIN tt ON tt.id = r.task_type_id`,
		strings.Join(TaskColumns, ", "), strings.Join(cols, ", "), KeyOf("r.params", "tt.concurrency_key_path"))
}

// rowsJSON writes the rows of items as a JSON array of objects keyed by
// column. Values of the columns in raw are JSON text already (params).
func rowsJSON[T any](cols []string, items []T, row func(T) []any, raw map[string]bool) (string, error) {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('{')
		for j, v := range row(it) {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('"')
			sb.WriteString(cols[j])
			sb.WriteString(`":`)
			if err := writeValue(&sb, v, raw[cols[j]]); err != nil {
				return "", fmt.Errorf("%s: %w", cols[j], err)
			}
		}
		sb.WriteByte('}')
	}
	sb.WriteByte(']')
	return sb.String(), nil
}

// writeValue writes one column's value; a nil pointer is null. A time is
// written with its offset, so the column gets the same instant.
func writeValue(sb *strings.Builder, v any, raw bool) error {
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
		return nil
	case string:
		if raw {
			sb.WriteString(x)
			return nil
		}
	case *string:
		if x == nil {
			sb.WriteString("null")
			return nil
		}
		v = *x
	case *int:
		if x == nil {
			sb.WriteString("null")
			return nil
		}
		v = *x
	case time.Time:
		v = pgTime(x)
	case *time.Time:
		if x == nil {
			sb.WriteString("null")
			return nil
		}
		v = pgTime(*x)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	sb.Write(out)
	return nil
}

// pgTime is t as text PostgreSQL reads to the microsecond that pgx's binary
// encoding (every other write, replay's too) keeps: truncated, where the
// text of its nanoseconds would be rounded.
func pgTime(t time.Time) string {
	return t.Truncate(time.Microsecond).Format(time.RFC3339Nano)
}
