package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// MaxBulkPage bounds one keyset page of a bulk walk (MatchingTasks).
const MaxBulkPage = 500

// CountTasks counts the tasks f matches (f.After and f.Limit are ignored),
// reading at most upTo rows: past that the answer is upTo and atLeast is
// true, so a count over a huge backlog stays a bounded read.
func (db *DB) CountTasks(ctx context.Context, f TaskFilter, upTo int) (n int, atLeast bool, err error) {
	f.After = ""
	if f.Search != "" {
		db.loadTitleSample(ctx)
	}
	var args sqlArgs
	where, err := db.taskWhere(f, &args)
	if err != nil {
		return 0, false, err
	}
	sql := `SELECT count(*) FROM (SELECT 1 FROM worker_tasks t WHERE ` + where + ` LIMIT ` + args.add(upTo+1) + `) m`
	if err := db.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("count tasks: %w", mapErr(err))
	}
	if n > upTo {
		return upTo, true, nil
	}
	return n, false, nil
}

// TaskRef names one task of a bulk walk and its place in the list order.
type TaskRef struct {
	ID     string
	Cursor string
}

// MatchingTasks is the next keyset page (at most MaxBulkPage, f.Limit when
// smaller) of the tasks f matches, in the list's order (newest first) and
// after f.After. Only ids are read: the caller acts on each task through
// its own command, which reads the task again.
func (db *DB) MatchingTasks(ctx context.Context, f TaskFilter) ([]TaskRef, error) {
	if f.Limit <= 0 || f.Limit > MaxBulkPage {
		f.Limit = MaxBulkPage
	}
	sql, args, err := db.pageSQL(f, `t.id, t.created_at`, f.Limit)
	if err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("matching tasks: %w", mapErr(err))
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskRef, error) {
		var t events.Task
		if err := r.Scan(&t.ID, &t.CreatedAt); err != nil {
			return TaskRef{}, err
		}
		t.CreatedAt = t.CreatedAt.UTC()
		return TaskRef{ID: t.ID, Cursor: Cursor(&t)}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("matching tasks: %w", mapErr(err))
	}
	return refs, nil
}
