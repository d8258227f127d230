package replay

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// table is one read model that replay rebuilds: its event-derived columns
// (the only ones compared and rebuilt), its key, the column naming the
// stream each row comes from, and its rows in a fold.
//
// A new projection plugs in here: its columns and row function (package
// projections), the stream column, and its rows in the fold (fold.go).
type table struct {
	name    string
	columns []string
	key     []string
	// stream is the column holding the stream id a row was folded from:
	// the key of a table with one row per stream, the task of a table with
	// one row per event. Replay reads and replaces rows by ranges and sets
	// of streams through it, so it must lead an index.
	stream string
	rows   func(f *fold) (n int, src pgx.CopyFromSource)
	// derived are columns computed from other projections after the rows
	// are written (gates.go): neither compared with the fold nor carried
	// over from the live table.
	derived []string
	// pruned, when set, is the condition on a row r that the live table
	// deleted it on purpose (the history a schedule no longer keeps), given
	// the qualified name of the table that records what was pruned: replay
	// leaves such rows out, so the fold equals the live table.
	pruned func(history string) string
}

// prunedFirings: the schedule_firings rows before the first one a
// schedule's kept history starts at (store.PruneScheduleHistory).
func prunedFirings(history string) string {
	return `EXISTS (SELECT 1 FROM ` + history + ` h WHERE h.schedule_id = r.schedule_id AND r.version < h.from_version)`
}

// tables lists every projection rebuilt from events, in the order they are
// written and locked. user_credentials is not one: secrets never enter the
// log (ADR 002). task_counts is derived from worker_tasks (counts.go).
func tables() []table {
	return []table{
		{
			name: "users", columns: projections.UserColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.users, func(u *events.User) []any { return projections.UserRow(u) })
			},
		},
		{
			name: "task_types", columns: projections.TaskTypeColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.types, func(tt *events.TaskType) []any { return projections.TaskTypeRow(tt) })
			},
		},
		{
			name: "worker_tasks", columns: projections.TaskColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.tasks, func(t *events.Task) []any { return projections.TaskRow(t) })
			},
			derived: append(slices.Clone(projections.GateColumns), "deps_left"),
		},
		{
			name: "task_dependencies", columns: projections.DependencyColumns, key: []string{"task_id", "depends_on"}, stream: "task_id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				var rows [][]any
				for _, t := range f.tasks {
					rows = append(rows, projections.DependencyRows(t)...)
				}
				return len(rows), pgx.CopyFromRows(rows)
			},
		},
		{
			name: "workflows", columns: projections.WorkflowColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.workflows, func(w *events.Workflow) []any { return projections.WorkflowRow(w) })
			},
		},
		{
			name: "task_titles", columns: projections.TitleColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.tasks, func(t *events.Task) []any { return projections.TitleRow(t) })
			},
		},
		{
			name: "worker_task_updates", columns: projections.UpdateColumns, key: []string{"id"}, stream: "task_id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				rows := f.uncompacted(f.updates, 1, 5)
				return len(rows), pgx.CopyFromRows(rows)
			},
		},
		{
			name: "task_data", columns: projections.DataColumns, key: []string{"id"}, stream: "task_id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.data, func(d *events.TaskData) []any { return projections.DataRow(d) })
			},
		},
		{
			name: "task_checkpoints", columns: projections.CheckpointColumns, key: []string{"task_id"}, stream: "task_id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.checkpoints, func(c *events.TaskCheckpoint) []any { return projections.CheckpointRow(c) })
			},
		},
		{
			name: "task_assignments", columns: projections.AssignmentColumns, key: []string{"task_id", "version"}, stream: "task_id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				rows := f.uncompacted(f.assignments, 0, 1)
				return len(rows), pgx.CopyFromRows(rows)
			},
		},
		{
			name: "schedules", columns: projections.ScheduleColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(f.schedules, func(s *events.Schedule) []any { return projections.ScheduleRow(s) })
			},
		},
		{
			name: "schedule_firings", columns: projections.FiringColumns, key: []string{"schedule_id", "version"}, stream: "schedule_id",
			rows:   func(f *fold) (int, pgx.CopyFromSource) { return len(f.firings), pgx.CopyFromRows(f.firings) },
			pruned: prunedFirings,
		},
		{
			name: "freshness_rules", columns: projections.FreshnessRuleColumns, key: []string{"id"}, stream: "id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				return aggregateRows(liveRules(f), func(r *events.FreshnessRule) []any { return projections.FreshnessRuleRow(r) })
			},
		},
		{
			name: "freshness_keys", columns: projections.FreshnessKeyColumns, key: []string{"rule_id", "key"}, stream: "rule_id",
			rows: func(f *fold) (int, pgx.CopyFromSource) {
				rows := freshnessKeyRows(f)
				return len(rows), pgx.CopyFromRows(rows)
			},
			derived: projections.FreshnessKeyDerived,
		},
	}
}

// aggregateRows yields one row per aggregate in key order: ids are UUIDv7,
// so a rebuilt table is laid out in creation order, like the live one.
// The keys are sorted on the first row asked for, so counting is free.
func aggregateRows[T any](m map[key]*T, row func(*T) []any) (int, pgx.CopyFromSource) {
	var ids []key
	i := -1
	return len(m), pgx.CopyFromFunc(func() ([]any, error) {
		if ids == nil {
			ids = slices.SortedFunc(maps.Keys(m), func(a, b key) int { return bytes.Compare(a[:], b[:]) })
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
	uuids, err := uuidColumns(ctx, tx, into, t.columns)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", t.name, err)
	}
	if len(uuids) > 0 {
		src = &uuidSource{CopyFromSource: src, cols: uuids}
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

// uuidColumns returns the positions in cols of the uuid columns of table.
func uuidColumns(ctx context.Context, tx pgx.Tx, table pgx.Identifier, cols []string) ([]int, error) {
	rows, err := tx.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = $1::regclass AND atttypid = 'uuid'::regtype AND attnum > 0 AND NOT attisdropped`, table.Sanitize())
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []int
	for i, c := range cols {
		if slices.Contains(names, c) {
			out = append(out, i)
		}
	}
	return out, nil
}

// uuidSource hands COPY parsed UUIDs instead of the strings the row
// functions return: pgx would otherwise try the binary encoding, fail,
// build an error and fall back to parsing text, once per value. It converts
// the row in place.
type uuidSource struct {
	pgx.CopyFromSource
	cols []int
}

func (s *uuidSource) Values() ([]any, error) {
	row, err := s.CopyFromSource.Values()
	if err != nil {
		return nil, err
	}
	for _, i := range s.cols {
		var text string
		switch v := row[i].(type) {
		case string:
			text = v
		case *string:
			if v == nil {
				row[i] = nil
				continue
			}
			text = *v
		default:
			continue
		}
		id, err := uuid.Parse(text)
		if err != nil {
			return nil, fmt.Errorf("column %d: %q is not a UUID: %w", i, text, err)
		}
		row[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return row, nil
}
