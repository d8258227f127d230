package replay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// table is one read model that replay rebuilds: its event-derived columns
// (the only ones compared and rebuilt), its key, and its rows in a fold.
type table struct {
	name    string
	columns []string
	key     []string
	// aggregate tables hold one row per stream; a catch-up replaces the
	// rows of the streams it touched. The others get one row per event and
	// a catch-up only adds rows.
	aggregate bool
	rows      func(f *fold) (n int, src pgx.CopyFromSource)
	ids       func(f *fold) []string // streams touched, for aggregate tables
}

// tables lists every projection rebuilt from events, in the order they are
// written and locked. user_credentials is not one: secrets never enter the
// log (ADR 002).
func tables() []table {
	return []table{
		{
			name: "users", columns: projections.UserColumns, key: []string{"id"}, aggregate: true,
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.users, func(u *events.User) []any { return projections.UserRow(u) })
			},
			ids: func(f *fold) []string { return slices.Collect(maps.Keys(f.users)) },
		},
		{
			name: "task_types", columns: projections.TaskTypeColumns, key: []string{"id"}, aggregate: true,
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.types, func(tt *events.TaskType) []any { return projections.TaskTypeRow(tt) })
			},
			ids: func(f *fold) []string { return slices.Collect(maps.Keys(f.types)) },
		},
		{
			name: "worker_tasks", columns: projections.TaskColumns, key: []string{"id"}, aggregate: true,
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.tasks, func(t *events.Task) []any { return projections.TaskRow(t) })
			},
			ids: func(f *fold) []string { return slices.Collect(maps.Keys(f.tasks)) },
		},
		{
			name: "worker_task_updates", columns: projections.UpdateColumns, key: []string{"id"},
			rows: func(f *fold) (int, pgx.CopyFromSource) { return len(f.updates), pgx.CopyFromRows(f.updates) },
		},
		{
			name: "task_assignments", columns: projections.AssignmentColumns, key: []string{"task_id", "version"},
			rows: func(f *fold) (int, pgx.CopyFromSource) { return len(f.assignments), pgx.CopyFromRows(f.assignments) },
		},
	}
}

// aggregateRows yields one row per aggregate in key order: ids are UUIDv7,
// so a rebuilt table is laid out in creation order, like the live one.
// The keys are sorted on the first row asked for, so counting is free.
func aggregateRows[T any](m map[string]*T, row func(*T) []any) (int, pgx.CopyFromSource) {
	var ids []string
	i := -1
	return len(m), pgx.CopyFromFunc(func() ([]any, error) {
		if ids == nil {
			ids = slices.Sorted(maps.Keys(m))
		}
		i++
		if i >= len(ids) {
			return nil, nil
		}
		return row(m[ids[i]]), nil
	})
}

// copyRows writes t's rows of f into the table named into.
func copyRows(ctx context.Context, tx pgx.Tx, into pgx.Identifier, t table, f *fold) (int64, error) {
	n, src := t.rows(f)
	if n == 0 {
		return 0, nil
	}
	written, err := tx.CopyFrom(ctx, into, t.columns, src)
	if err != nil {
		return written, fmt.Errorf("copy %s: %w", t.name, err)
	}
	return written, nil
}

func quoteIdents(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}
