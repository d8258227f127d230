package projections

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// NewTasks queues the writes of tasks being created, however many: one
// multi-row insert into worker_tasks, one into task_titles, one change of
// task_counts and pending_counts for them all, and the assignment rows of those assigned at
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
	p := PendingCounts{}
	for _, t := range tasks {
		d.Add(t, 1)
		p.Add(t, 1)
	}
	queueCountsAndPending(b, d, p)
	for _, e := range evs {
		queueTaskAssignment(b, e)
		queueMinute(b, e)
	}
	var dependent []string
	for _, t := range tasks {
		queueKeyTask(b, nil, t)
		if len(t.DependsOn) > 0 {
			dependent = append(dependent, t.ID)
		}
	}
	if len(dependent) > 0 {
		b.Queue(insertDependencies, dependent)
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
// column, as bytes pgx sends as they are. Values of the columns in raw are
// JSON text already (params). It sits on the bulk create path, so it
// appends into one buffer sized from the first row, and writes the common
// values itself rather than through encoding/json (ADR 018).
func rowsJSON[T any](cols []string, items []T, row func(T) []any, raw map[string]bool) ([]byte, error) {
	isRaw := make([]bool, len(cols))
	for j, c := range cols {
		isRaw[j] = raw[c]
	}
	var buf []byte
	for i, it := range items {
		if i == 1 {
			buf = slices.Grow(buf, len(buf)*(len(items)-1)*5/4)
		}
		if i > 0 {
			buf = append(buf, ',')
		} else {
			buf = append(buf, '[')
		}
		buf = append(buf, '{')
		for j, v := range row(it) {
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, '"')
			buf = append(buf, cols[j]...)
			buf = append(buf, '"', ':')
			var err error
			if buf, err = appendValue(buf, v, isRaw[j]); err != nil {
				return nil, fmt.Errorf("%s: %w", cols[j], err)
			}
		}
		buf = append(buf, '}')
	}
	if len(items) == 0 {
		buf = append(buf, '[')
	}
	buf = append(buf, ']')
	return buf, nil
}

// appendValue appends one column's value; a nil pointer is null. A time is
// written with its offset, so the column gets the same instant.
func appendValue(buf []byte, v any, raw bool) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(buf, "null"...), nil
	case string:
		if raw {
			return append(buf, x...), nil
		}
		return appendJSONString(buf, x), nil
	case *string:
		if x == nil {
			return append(buf, "null"...), nil
		}
		return appendJSONString(buf, *x), nil
	case int:
		return strconv.AppendInt(buf, int64(x), 10), nil
	case *int:
		if x == nil {
			return append(buf, "null"...), nil
		}
		return strconv.AppendInt(buf, int64(*x), 10), nil
	case bool:
		return strconv.AppendBool(buf, x), nil
	case time.Time:
		return appendTime(buf, x), nil
	case *time.Time:
		if x == nil {
			return append(buf, "null"...), nil
		}
		return appendTime(buf, *x), nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return buf, err
	}
	return append(buf, out...), nil
}

// appendJSONString appends s as a JSON string, escaping what JSON requires
// and writing invalid UTF-8 as U+FFFD, as encoding/json does.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			if c < 0x20 {
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				buf = append(buf, `\ufffd`...)
			}
		}
		i++
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// appendTime appends t as a JSON string of the text PostgreSQL reads to the microsecond that pgx's binary
// encoding (every other write, replay's too) keeps: truncated, where the
// text of its nanoseconds would be rounded.
func appendTime(buf []byte, t time.Time) []byte {
	buf = append(buf, '"')
	buf = t.Truncate(time.Microsecond).AppendFormat(buf, time.RFC3339Nano)
	return append(buf, '"')
}
