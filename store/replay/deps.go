package replay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A blocked task's deps_left is derived, not folded: it counts the task's
// dependencies whose retry chain has no completed task (DESIGN §13). The
// writers keep it on the row; replay derives it from the rebuilt tasks and
// edges and verifies the live one the same way.

// depsLeftOf is the number of open dependencies of task w, its tables in
// schema s: an edge is done when a task of its dependency's chain (followed
// forwards through retry_task_id) completed.
func depsLeftOf(s string) string {
	return fmt.Sprintf(`(SELECT count(*) FROM %[1]s.task_dependencies d WHERE d.task_id = w.id AND NOT EXISTS (
    WITH RECURSIVE c(id) AS (
        SELECT d.depends_on
        UNION ALL
        SELECT x.retry_task_id FROM %[1]s.worker_tasks x JOIN c ON x.id = c.id WHERE x.retry_task_id IS NOT NULL)
    SELECT 1 FROM c JOIN %[1]s.worker_tasks y ON y.id = c.id WHERE y.status = 'completed'))::int`, s)
}

// deriveDepsLeft sets deps_left of every blocked task in the rebuild schema.
func deriveDepsLeft(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	s := pgx.Identifier{rebuildSchema}.Sanitize()
	_, err := q.Exec(ctx, fmt.Sprintf(`UPDATE %s.worker_tasks w SET deps_left = %s WHERE w.status = 'blocked'`, s, depsLeftOf(s)))
	if err != nil {
		return fmt.Errorf("derive deps_left of worker_tasks: %w", err)
	}
	return nil
}

// verifyDepsLeft compares the live deps_left of every blocked task with
// what its live edges and dependencies say.
func verifyDepsLeft(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	var schema string
	if err := tx.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = 'worker_tasks'::regclass`).Scan(&schema); err != nil {
		return fmt.Errorf("find worker_tasks: %w", err)
	}
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT id::text, deps_left, want FROM (
		SELECT w.id, w.deps_left, %s AS want FROM %s.worker_tasks w WHERE w.status = 'blocked') x
		WHERE deps_left <> want ORDER BY id`, depsLeftOf(s), s))
	if err != nil {
		return fmt.Errorf("check deps_left of worker_tasks: %w", err)
	}
	defer rows.Close()
	c := rep.collect(gatesTable, max)
	for rows.Next() {
		var id string
		var live, want int
		if err := rows.Scan(&id, &live, &want); err != nil {
			return err
		}
		c.add(Difference{Key: "id=" + id, Side: Changed, Columns: []string{"deps_left"}, Live: []*string{itoa(&live)}, Events: []*string{itoa(&want)}})
	}
	return rows.Err()
}
