package replay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/clawdbot/task-service/projections"
)

// The gate columns of worker_tasks (projections.GateColumns) are copied
// from each open task's type, not folded from the task's events: whether
// the type is paused or limited, and the task's concurrency key under the
// type's key path (DESIGN §13). Replay derives them from the rebuilt types
// once their tasks are written, and verifies the live ones against the
// live types (which the fold verifies). A finished task keeps what it had:
// nothing reads it there.

// gatesTable is the table whose gate columns are checked: its differences
// are reported with its others, naming only those columns.
const gatesTable = "worker_tasks"

// gateOf is task w's gate under type tt (NULL when the type is missing):
// its gated flag and its key, as the writers set them.
var gateOf = `coalesce(tt.gated, false), CASE WHEN tt.gated THEN ` + projections.KeyOf("w.params", "tt.concurrency_key_path") + ` END`

// deriveGates sets the gate columns of the open tasks in the rebuild schema
// that where selects (a condition on w).
func deriveGates(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, where string, args ...any) error {
	schema := pgx.Identifier{rebuildSchema}.Sanitize()
	_, err := q.Exec(ctx, fmt.Sprintf(`UPDATE %[1]s.worker_tasks w SET (gated, concurrency_key) = (%[2]s)
		FROM %[1]s.task_types tt
		WHERE tt.id = w.task_type_id AND w.status IN ('blocked', 'pending', 'in_progress') AND %[3]s
		  AND (w.gated, w.concurrency_key) IS DISTINCT FROM (%[2]s)`, schema, gateOf, where), args...)
	if err != nil {
		return fmt.Errorf("derive the gates of worker_tasks: %w", err)
	}
	return nil
}

// deriveDeltaGates derives the gates of the tasks f refolded, and of every
// open task of the types it refolded (their controls may have changed).
func deriveDeltaGates(ctx context.Context, tx pgx.Tx, f *fold) error {
	if tasks := streamIDs(f.tasks); len(tasks) > 0 {
		if err := deriveGates(ctx, tx, `w.id = ANY($1::uuid[])`, tasks); err != nil {
			return err
		}
	}
	if len(f.types) == 0 {
		return nil
	}
	return deriveGates(ctx, tx, `w.task_type_id = ANY($1::uuid[])`, streamIDs(f.types))
}

func streamIDs[T any](m map[key]*T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k.text())
	}
	return out
}

// verifyGates compares the live gate columns of every open task with its
// live type's, adding what differs to worker_tasks' counts.
func verifyGates(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	rows, err := tx.Query(ctx, `SELECT w.id::text, w.gated::text, w.concurrency_key, g.gated::text, g.key
		FROM worker_tasks w LEFT JOIN task_types tt ON tt.id = w.task_type_id
		CROSS JOIN LATERAL (SELECT `+gateOf+`) g(gated, key)
		WHERE w.status IN ('blocked', 'pending', 'in_progress') AND (w.gated, w.concurrency_key) IS DISTINCT FROM (g.gated, g.key)
		ORDER BY w.id`)
	if err != nil {
		return fmt.Errorf("check the gates of worker_tasks: %w", err)
	}
	defer rows.Close()
	c := rep.collect(gatesTable, max)
	for rows.Next() {
		var id string
		live, want := make([]*string, 2), make([]*string, 2)
		if err := rows.Scan(&id, &live[0], &live[1], &want[0], &want[1]); err != nil {
			return err
		}
		c.add(Difference{Key: "id=" + id, Side: Changed, Columns: projections.GateColumns, Live: live, Events: want})
	}
	return rows.Err()
}
