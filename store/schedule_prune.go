package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/advisory"
)

// HistoryLimits bound what is kept of each schedule's history: executions
// fired within the last Days days and among its last Runs runs.
type HistoryLimits struct {
	Days int
	Runs int
}

// PruneReport says what one pruning pass did.
type PruneReport struct {
	Schedules int   // schedules whose kept history moved
	Firings   int64 // schedule_firings rows deleted
	// Skipped: another instance was pruning, so this pass did nothing.
	Skipped bool
}

// historyPruneBatch bounds the rows one statement deletes, so a schedule
// with a huge history is never one long transaction.
const historyPruneBatch = 1000

// schedulePageSize is how many schedules one pass reads at a time.
const schedulePageSize = 100

// pruneLockKey is the advisory lock a pruning pass holds: one instance
// prunes at a time (a second one would only wait on the same rows).
const pruneLockKey = 7035_0001

// PruneScheduleHistory prunes every schedule's history to lim: the
// executions list starts at the first kept run (schedule_history), the
// schedule_firings rows before the first kept one are deleted, a batch at
// a time, and the schedule's counter rows are folded into one. Tasks and
// events are never touched: an execution's tasks are tasks, with their own
// lifecycle, and the log is the history. The newest firing row is always
// kept: its unique (schedule, due time) is the backstop against firing
// that due time twice.
func (db *DB) PruneScheduleHistory(ctx context.Context, lim HistoryLimits) (PruneReport, error) {
	var rep PruneReport
	if lim.Days < 1 || lim.Runs < 1 {
		return rep, fmt.Errorf("prune schedule history: days and runs must be at least 1, not %d and %d", lim.Days, lim.Runs)
	}
	conn, release, locked, err := advisory.TryLock(ctx, db.pool.Pool, pruneLockKey)
	if err != nil {
		return rep, mapErr(fmt.Errorf("prune schedule history: lock: %w", err))
	}
	if !locked {
		rep.Skipped = true
		return rep, nil
	}
	defer release()
	cut := db.Now().Add(-time.Duration(lim.Days) * 24 * time.Hour)
	after := "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := conn.Query(ctx, `SELECT id::text, runs FROM schedules WHERE id > $1 ORDER BY id LIMIT $2`, after, schedulePageSize)
		if err != nil {
			return rep, mapErr(fmt.Errorf("prune schedule history: %w", err))
		}
		type sched struct {
			id   string
			runs int
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sched, error) {
			var s sched
			return s, r.Scan(&s.id, &s.runs)
		})
		if err != nil {
			return rep, mapErr(fmt.Errorf("prune schedule history: %w", err))
		}
		for _, s := range page {
			moved, n, err := pruneSchedule(ctx, conn, s.id, s.runs, lim.Runs, cut)
			rep.Firings += n
			if err != nil {
				return rep, err
			}
			if moved {
				rep.Schedules++
			}
			if err := foldScheduleCounts(ctx, conn, s.id); err != nil {
				return rep, err
			}
		}
		if len(page) < schedulePageSize {
			return rep, nil
		}
		after = page[len(page)-1].id
	}
}

// keptHistory computes where schedule $1's kept history starts ($2 its
// runs, $3 the runs kept, $4 the cut-off time): the first run fired after
// the cut-off and among the last runs, and the first firing row that is
// such a run or a skip or failed firing after the cut-off (the newest row
// at the latest). Neither moves back.
const keptHistory = `WITH old AS (
    SELECT coalesce((SELECT from_run FROM schedule_history WHERE schedule_id = $1), 0) AS run,
           coalesce((SELECT from_version FROM schedule_history WHERE schedule_id = $1), 0) AS version
), runs AS (
    SELECT greatest(o.run, $2::int - $3::int + 1,
                    coalesce((SELECT f.run FROM schedule_firings f WHERE f.schedule_id = $1 AND f.run IS NOT NULL
                                 AND f.at >= $4 ORDER BY f.version LIMIT 1), $2::int + 1)) AS from_run
      FROM old o
)
SELECT r.from_run,
       greatest(o.version, least(
           coalesce((SELECT f.version FROM schedule_firings f WHERE f.schedule_id = $1
                        AND (f.run >= r.from_run OR (f.run IS NULL AND f.at >= $4)) ORDER BY f.version LIMIT 1), 2147483647),
           coalesce((SELECT max(f.version) FROM schedule_firings f WHERE f.schedule_id = $1), 0))),
       r.from_run > o.run
  FROM runs r, old o`

// pruneSchedule moves one schedule's kept history and deletes the firing
// rows before it, a batch per statement. It reports whether the history
// moved and how many rows it deleted.
func pruneSchedule(ctx context.Context, conn *pgxpool.Conn, id string, runs, keep int, cut time.Time) (bool, int64, error) {
	var fromRun, fromVersion int
	var moved bool
	if err := conn.QueryRow(ctx, keptHistory, id, runs, keep, cut).Scan(&fromRun, &fromVersion, &moved); err != nil {
		return false, 0, mapErr(fmt.Errorf("prune schedule %s: %w", id, err))
	}
	// The mark first: readers stop listing what is about to go.
	if _, err := conn.Exec(ctx, `INSERT INTO schedule_history AS h (schedule_id, from_run, from_version, pruned_at)
		VALUES ($1, $2, $3, now())
		ON CONFLICT (schedule_id) DO UPDATE SET from_run = greatest(h.from_run, excluded.from_run),
		    from_version = greatest(h.from_version, excluded.from_version), pruned_at = excluded.pruned_at
		WHERE (h.from_run, h.from_version) IS DISTINCT FROM (excluded.from_run, excluded.from_version)`,
		id, fromRun, fromVersion); err != nil {
		return false, 0, mapErr(fmt.Errorf("prune schedule %s: %w", id, err))
	}
	var deleted int64
	for {
		tag, err := conn.Exec(ctx, `DELETE FROM schedule_firings WHERE schedule_id = $1 AND version IN (
			SELECT version FROM schedule_firings WHERE schedule_id = $1 AND version < $2 ORDER BY version LIMIT $3)`,
			id, fromVersion, historyPruneBatch)
		if err != nil {
			return moved, deleted, mapErr(fmt.Errorf("prune schedule %s: firings: %w", id, err))
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < historyPruneBatch {
			return moved || deleted > 0, deleted, nil
		}
		if err := ctx.Err(); err != nil {
			return moved, deleted, err
		}
	}
}

// foldScheduleCountsSQL folds schedule $1's per-process rows into pid 0. It
// names every column: TestFoldsNameEveryCounterColumn keeps it so.
var foldScheduleCountsSQL = `WITH gone AS (
		DELETE FROM schedule_counts WHERE schedule_id = $1 AND pid <> 0 RETURNING *
	)
	INSERT INTO schedule_counts AS c (schedule_id, pid, completed, failed, cancelled, timed, seconds,
	        last_failure_run, last_failure_task_id, last_failure_reason, last_failure_at)
	SELECT $1, 0, sum(completed), sum(failed), sum(cancelled), sum(timed), sum(seconds),
	       (array_agg(last_failure_run ORDER BY last_failure_run DESC NULLS LAST))[1],
	       (array_agg(last_failure_task_id ORDER BY last_failure_run DESC NULLS LAST))[1],
	       (array_agg(last_failure_reason ORDER BY last_failure_run DESC NULLS LAST))[1],
	       (array_agg(last_failure_at ORDER BY last_failure_run DESC NULLS LAST))[1]
	  FROM gone HAVING count(*) > 0` + projections.AddScheduleCounts

// foldScheduleCounts folds a schedule's counter rows of the server
// processes into its pid 0 row, so their number stays small while
// connections come and go. A row a writer holds waits for its commit.
func foldScheduleCounts(ctx context.Context, conn *pgxpool.Conn, id string) error {
	_, err := conn.Exec(ctx, foldScheduleCountsSQL, id)
	if err != nil && !errors.Is(err, context.Canceled) {
		return mapErr(fmt.Errorf("fold counters of schedule %s: %w", id, err))
	}
	return err
}
