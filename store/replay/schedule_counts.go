package replay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/projections"
)

const scheduleCountsTable = "schedule_counts"

// A schedule's counters are sums kept on write over its tasks, not over
// events, so replay recounts them from the tasks
// (projections.RecountScheduleCounts), whose diffs against the events
// check the tasks. A rebuild writes the recount of the fresh tasks as one
// pid 0 row per schedule after the load; each catch-up takes back the
// recount of the executions (runs) its streams belong to before it
// replaces their tasks and adds it again after, as writers do, so the
// locked last step reads a few runs, never a schedule's whole history.
// Writers add their process rows to the swapped table from then on.

// loadScheduleCounts writes the recount of the fresh tasks into the fresh
// schedule_counts.
func (r *rebuilder) loadScheduleCounts(ctx context.Context) error {
	tag, err := r.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (%s) %s`,
		pgx.Identifier{rebuildSchema, scheduleCountsTable}.Sanitize(), projections.ScheduleCountsColumns,
		projections.RecountScheduleCounts(pgx.Identifier{rebuildSchema, "worker_tasks"}.Sanitize(), "true")))
	if err != nil {
		return fmt.Errorf("write %s: %w", scheduleCountsTable, err)
	}
	r.rep.Rows[scheduleCountsTable] = tag.RowsAffected()
	return nil
}

// scheduleRuns are the executions f's tasks belong to.
type scheduleRuns struct {
	schedules []string
	runs      []int
}

func runsOf(f *fold) scheduleRuns {
	var out scheduleRuns
	seen := map[string]bool{}
	for _, t := range f.tasks {
		if t.ScheduleID == nil || t.ScheduleRun == nil {
			continue
		}
		if k := fmt.Sprint(*t.ScheduleID, *t.ScheduleRun); !seen[k] {
			seen[k] = true
			out.schedules, out.runs = append(out.schedules, *t.ScheduleID), append(out.runs, *t.ScheduleRun)
		}
	}
	return out
}

// addRuns adds (sign 1) or takes back (-1), in tx, the recount of the runs
// from the fresh tasks to the fresh counters, merged as writers merge
// theirs (a take-back leaves the last failure); it returns the rows it
// added.
func addRuns(ctx context.Context, tx pgx.Tx, runs scheduleRuns, sign int) (int64, error) {
	if len(runs.runs) == 0 {
		return 0, nil
	}
	recount := projections.RecountScheduleCounts(pgx.Identifier{rebuildSchema, "worker_tasks"}.Sanitize(),
		`(l.schedule_id, l.schedule_run) IN (SELECT * FROM unnest($1::uuid[], $2::int[]))`)
	values := "*"
	if sign < 0 {
		values = `schedule_id, pid, -completed, -failed, -cancelled, -timed, -seconds, NULL::int, NULL::uuid, NULL::text, NULL::timestamptz`
	}
	var n int64
	err := tx.QueryRow(ctx, fmt.Sprintf(`WITH up AS (
    INSERT INTO %s AS c (%s) SELECT %s FROM (%s) r %s RETURNING xmax = 0 AS inserted
) SELECT count(*) FILTER (WHERE inserted) FROM up`,
		pgx.Identifier{rebuildSchema, scheduleCountsTable}.Sanitize(), projections.ScheduleCountsColumns, values, recount,
		projections.AddScheduleCounts), runs.schedules, runs.runs).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("catch up %s: %w", scheduleCountsTable, err)
	}
	return n, nil
}

// verifyScheduleCounts compares each schedule's counters of ended
// executions (the sums of its schedule_counts rows) with their recount
// from the tasks. Durations and the last failure are not compared.
func verifyScheduleCounts(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	rows, err := tx.Query(ctx, `WITH live AS (
	    SELECT schedule_id, sum(completed) AS completed, sum(failed) AS failed, sum(cancelled) AS cancelled
	      FROM schedule_counts GROUP BY schedule_id
	), recount AS (`+projections.RecountScheduleCounts("worker_tasks", "true")+`)
	SELECT coalesce(l.schedule_id, r.schedule_id)::text,
	       coalesce(l.completed, 0), coalesce(l.failed, 0), coalesce(l.cancelled, 0),
	       coalesce(r.completed, 0), coalesce(r.failed, 0), coalesce(r.cancelled, 0)
	  FROM live l FULL JOIN recount r ON r.schedule_id = l.schedule_id
	 WHERE (coalesce(l.completed, 0), coalesce(l.failed, 0), coalesce(l.cancelled, 0))
	       IS DISTINCT FROM (coalesce(r.completed, 0), coalesce(r.failed, 0), coalesce(r.cancelled, 0))
	 ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("check %s: %w", scheduleCountsTable, err)
	}
	defer rows.Close()
	c := rep.collect(scheduleCountsTable, max)
	for rows.Next() {
		var id string
		var live, want [3]int64
		if err := rows.Scan(&id, &live[0], &live[1], &live[2], &want[0], &want[1], &want[2]); err != nil {
			return err
		}
		c.add(Difference{Key: "schedule_id=" + id + " (sum over its rows)", Side: Changed,
			Columns: []string{"completed", "failed", "cancelled"}, Live: texts(live[:]), Events: texts(want[:])})
	}
	return rows.Err()
}
