package replay

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

const scheduleCountsTable = "schedule_counts"

// verifyScheduleCounts compares each schedule's counters of ended
// executions (the sums of its schedule_counts rows) with a recount of the
// tasks, which the diffs of worker_tasks check against the events: the
// last task of each retry chain gives the outcome, as
// projections.ExecutionOutcome says. Durations and the last failure are
// not compared.
func verifyScheduleCounts(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	rows, err := tx.Query(ctx, `WITH live AS (
	    SELECT schedule_id, sum(completed) AS completed, sum(failed) AS failed, sum(cancelled) AS cancelled
	      FROM schedule_counts GROUP BY schedule_id
	), recount AS (
	    SELECT schedule_id, count(*) FILTER (WHERE status = 'completed') AS completed,
	           count(*) FILTER (WHERE status = 'failed' AND retry_outcome IN ('skipped', 'exhausted')) AS failed,
	           count(*) FILTER (WHERE status = 'cancelled') AS cancelled
	      FROM worker_tasks
	     WHERE schedule_id IS NOT NULL AND schedule_run IS NOT NULL AND retry_task_id IS NULL
	     GROUP BY schedule_id
	)
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
	td := rep.Tables[scheduleCountsTable]
	cols := []string{"completed", "failed", "cancelled"}
	kept := 0
	for rows.Next() {
		var id string
		var live, want [3]int64
		if err := rows.Scan(&id, &live[0], &live[1], &live[2], &want[0], &want[1], &want[2]); err != nil {
			return err
		}
		td.LiveRows++
		td.FoldRows++
		if kept++; kept > max {
			rep.Truncated = true
			continue
		}
		d := Difference{Table: scheduleCountsTable, Key: "schedule_id=" + id + " (sum over its rows)", Side: Changed, Columns: cols}
		for i, c := range cols {
			l, w := strconv.FormatInt(live[i], 10), strconv.FormatInt(want[i], 10)
			d.Live, d.Events = append(d.Live, &l), append(d.Events, &w)
			if l != w {
				d.Changed = append(d.Changed, c)
			}
		}
		rep.Differences = append(rep.Differences, d)
	}
	rep.Tables[scheduleCountsTable] = td
	return rows.Err()
}
