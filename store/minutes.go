package store

import (
	"context"
	"fmt"
	"time"
)

// minutesFoldBatch bounds the counter rows one fold statement moves, so a
// long pause in housekeeping is never one long transaction.
const minutesFoldBatch = 5000

// foldTaskMinutes folds up to $2 finished per-process minute rows (older than
// $1) into pid 0. It names every counter column: TestFoldsNameEveryCounterColumn
// keeps it so.
const foldTaskMinutes = `WITH picked AS (
		    SELECT minute, pid FROM task_minutes WHERE pid <> 0 AND minute < $1
		     ORDER BY minute LIMIT $2 FOR UPDATE SKIP LOCKED
		), gone AS (
		    DELETE FROM task_minutes m USING picked p WHERE m.minute = p.minute AND m.pid = p.pid RETURNING m.*
		), folded AS (
		    INSERT INTO task_minutes AS u (minute, pid, completed, failed, retries)
		    SELECT minute, 0, sum(completed), sum(failed), sum(retries) FROM gone GROUP BY minute
		    ON CONFLICT (minute, pid) DO UPDATE SET completed = u.completed + excluded.completed,
		        failed = u.failed + excluded.failed, retries = u.retries + excluded.retries
		)
		SELECT count(*) FROM gone`

// FoldTaskMinutes folds the per-process rows of task_minutes' finished
// minutes into their pid 0 row, a batch at a time (rows another instance is
// folding are skipped): a minute's totals stay the same, and the table
// keeps about a row per minute. A writer late into a folded minute adds a
// row the next fold takes. It returns how many rows it folded.
func (db *DB) FoldTaskMinutes(ctx context.Context) (int64, error) {
	before := db.Now().Truncate(time.Minute).Add(-time.Minute)
	var total int64
	for {
		var n int64
		err := db.pool.QueryRow(ctx, foldTaskMinutes, before, minutesFoldBatch).Scan(&n)
		if err != nil {
			return total, mapErr(fmt.Errorf("fold task minutes: %w", err))
		}
		total += n
		if n < minutesFoldBatch {
			return total, nil
		}
	}
}
