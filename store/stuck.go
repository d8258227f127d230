package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Queries and commands of the stuck detector (DESIGN §5). Each command
// re-decides on the current state, so running it twice, or on two instances
// at once, changes nothing the second time.

// SilentWorker is a worker marked online that has not been heard from.
type SilentWorker struct {
	ID             string
	Name           string
	LastActivityAt *time.Time
}

// SilentWorkers lists workers marked online whose last heartbeat is older
// than before (or missing), and workers never heard from (no heartbeat, not
// yet declared offline) that hold tasks and last claimed before before.
func (db *DB) SilentWorkers(ctx context.Context, before time.Time, limit int) ([]SilentWorker, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, full_name, last_activity_at FROM users u
		WHERE is_worker AND (
		      (online AND (last_activity_at IS NULL OR last_activity_at < $1))
		   OR (NOT online AND offline_since IS NULL AND last_activity_at IS NULL
		       AND (SELECT max(t.started_at) FROM worker_tasks t WHERE t.assigned_to = u.id AND t.status = 'in_progress') < $1))
		ORDER BY last_activity_at NULLS FIRST, id LIMIT $2`, before, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("silent workers: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SilentWorker, error) {
		var w SilentWorker
		err := r.Scan(&w.ID, &w.Name, &w.LastActivityAt)
		return w, err
	})
	return out, mapErr(err)
}

// MarkWorkerOffline appends worker.went_offline (with the last heartbeat, the
// threshold and the tasks in progress) when the worker is still marked online
// and silent for threshold. It reports whether it did.
func (db *DB) MarkWorkerOffline(ctx context.Context, id string, threshold time.Duration, meta events.Meta) (bool, error) {
	var u events.User
	var last *time.Time
	var lastClaim *time.Time
	var inProgress int
	err := db.pool.QueryRow(ctx, `SELECT `+userColumns+`, u.last_activity_at, h.n, h.last_claim
		  FROM users u, LATERAL (SELECT count(*) AS n, max(t.started_at) AS last_claim FROM worker_tasks t
		                          WHERE t.assigned_to = u.id AND t.status = 'in_progress') h
		 WHERE u.id = $1`, id).Scan(append(userDest(&u), &last, &inProgress, &lastClaim)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, mapErr(fmt.Errorf("mark worker offline: %w", err))
	}
	normalizeUser(&u)
	ps := u.GoOffline(last, lastClaim, threshold, inProgress, db.Now())
	if len(ps) == 0 {
		return false, nil
	}
	_, _, err = appendStream(ctx, db, db.pool, events.StreamUser, id, &u, ps, meta, db.projector.User, nil)
	if errors.Is(err, events.ErrConflict) {
		return false, nil // a heartbeat or another instance wrote first
	}
	return err == nil, err
}

// silentSince is when worker u was last heard from: its last heartbeat, or
// when it went offline if it never sent one.
const silentSince = `coalesce(u.last_activity_at, u.offline_since)`

// Stuck tasks, as the stats count them and the stuck list shows them, each
// set read from its own small side: the tasks in progress (which worker
// capacity bounds) whose holder is offline or silent since before (an SQL
// expression), and the pending tasks pre-assigned to a worker silent since
// before, read from those few workers through worker_tasks_preassigned,
// never from the backlog. The stuck detector fails the first kind after its
// stuck threshold and gives the second back to the pool on its next tick.
func stuckInProgress(before string) string {
	return `SELECT t.id FROM worker_tasks t JOIN users u ON u.id = t.assigned_to WHERE ` + stuckHeld(before)
}

// stuckHeld is the condition on t, joined to its holder u, of a stuck task
// in progress.
func stuckHeld(before string) string {
	return `t.status = 'in_progress' AND (NOT u.online OR coalesce(u.last_activity_at, t.started_at) < ` + before + `)`
}

// silentWorkers is the array of the workers silent since before.
func silentWorkers(before string) string {
	return `ARRAY(SELECT u.id FROM users u WHERE u.is_worker AND ` + silentSince + ` < ` + before + `)`
}

// stuckPage is the first limit tasks matching where that are stuck, in
// order (by created_at, which checkFilter ensures). The candidates' ids and
// keys come first, each set in its index's order: the tasks in progress,
// and each silent worker's pending tasks from worker_tasks_waiting_for
// (migration 056; index only when where names just the keyset); then only
// the page's rows are read. Joined by id, the whole stuck set's rows were
// read: 67 ms for 5,059 pending tasks of 49 silent workers, against 2 ms.
func stuckPage(cols, where, order, limit, before string) string {
	return `SELECT ` + cols + ` FROM worker_tasks t WHERE t.id IN (SELECT t.id FROM (
		(SELECT t.id, t.created_at FROM worker_tasks t JOIN users u ON u.id = t.assigned_to
		  WHERE ` + where + ` AND ` + stuckHeld(before) + `
		  ORDER BY ` + order + ` LIMIT ` + limit + `)
		UNION ALL
		(SELECT t.id, t.created_at FROM unnest(` + silentWorkers(before) + `) w(id)
		  CROSS JOIN LATERAL (SELECT t.id, t.created_at FROM worker_tasks t
		    WHERE t.assigned_to = w.id AND t.status = 'pending' AND ` + where + ` ORDER BY ` + order + ` LIMIT ` + limit + `) t)
	) t ORDER BY ` + order + ` LIMIT ` + limit + `) ORDER BY ` + order + ` LIMIT ` + limit
}

func stuckPending(before string) string {
	// = ANY(ARRAY(...)): the silent workers are read first, then an index
	// probe each; a join here was planned as a walk of every pre-assigned task.
	return `SELECT t.id FROM worker_tasks t WHERE t.status = 'pending'
		AND t.assigned_to = ANY(` + silentWorkers(before) + `)`
}

// OfflineHolders lists workers offline and not heard from since before that
// still hold pending tasks pre-assigned to them, which nobody else can claim.
func (db *DB) OfflineHolders(ctx context.Context, before time.Time, limit int) ([]SilentWorker, error) {
	rows, err := db.pool.Query(ctx, `SELECT u.id, u.full_name, u.last_activity_at FROM users u
		WHERE u.is_worker AND NOT u.online AND `+silentSince+` < $1
		  AND EXISTS (SELECT 1 FROM worker_tasks t WHERE t.assigned_to = u.id AND t.status = 'pending')
		ORDER BY `+silentSince+`, u.id LIMIT $2`, before, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("offline holders: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SilentWorker, error) {
		var w SilentWorker
		err := r.Scan(&w.ID, &w.Name, &w.LastActivityAt)
		return w, err
	})
	return out, mapErr(err)
}

// ReleaseFromOffline gives the pending tasks pre-assigned to worker id back
// to the pool (at most limit), each with task.released and a reason that
// says since when the worker is silent, if it is still offline and silent
// since before threshold ago; deactivation releases a worker's tasks the
// same way. It returns the tasks released.
func (db *DB) ReleaseFromOffline(ctx context.Context, id string, threshold time.Duration, limit int, meta events.Meta) ([]string, error) {
	var released []string
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		var silent *time.Time
		err := tx.QueryRow(ctx, `SELECT `+silentSince+` FROM users u
			WHERE u.id = $1 AND u.is_worker AND NOT u.online FOR UPDATE`, id).Scan(&silent)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // came back online meanwhile
		}
		if err != nil {
			return mapErr(fmt.Errorf("release from offline worker: %w", err))
		}
		if silent == nil || db.Now().Sub(*silent) < threshold {
			return nil
		}
		why := fmt.Sprintf("worker offline: not heard from since %s (offline threshold %d s); released to the pool",
			silent.UTC().Format(time.RFC3339), int(threshold/time.Second))
		released, err = db.releaseHeld(ctx, tx, id, []events.Status{events.StatusPending}, why, meta, limit)
		return err
	})
	return released, err
}

// StuckTask is a task in progress whose holder has gone silent.
type StuckTask struct {
	ID            string
	WorkerID      string
	WorkerName    string
	StartedAt     time.Time
	LastHeartbeat *time.Time
}

// StuckTasks lists tasks in progress since before startedBefore whose holder
// was last heard from before silentBefore (a holder never heard from counts
// as silent since it claimed the task).
func (db *DB) StuckTasks(ctx context.Context, startedBefore, silentBefore time.Time, limit int) ([]StuckTask, error) {
	rows, err := db.pool.Query(ctx, `SELECT t.id, t.assigned_to, u.full_name, t.started_at, u.last_activity_at
		  FROM worker_tasks t JOIN users u ON u.id = t.assigned_to
		 WHERE t.status = 'in_progress' AND t.started_at < $1
		   AND coalesce(u.last_activity_at, t.started_at) < $2
		 ORDER BY t.started_at, t.id LIMIT $3`, startedBefore, silentBefore, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("stuck tasks: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StuckTask, error) {
		var s StuckTask
		err := r.Scan(&s.ID, &s.WorkerID, &s.WorkerName, &s.StartedAt, &s.LastHeartbeat)
		s.StartedAt = s.StartedAt.UTC()
		return s, err
	})
	return out, mapErr(err)
}

// TimedOutTask is a task in progress for longer than its type allows.
type TimedOutTask struct {
	ID             string
	WorkerID       string
	StartedAt      time.Time
	TimeoutSeconds int
}

// TimedOutTasks lists tasks in progress past their type's timeout_seconds.
func (db *DB) TimedOutTasks(ctx context.Context, limit int) ([]TimedOutTask, error) {
	rows, err := db.pool.Query(ctx, `SELECT t.id, coalesce(t.assigned_to::text, ''), t.started_at, tt.timeout_seconds
		  FROM worker_tasks t JOIN task_types tt ON tt.id = t.task_type_id
		 WHERE t.status = 'in_progress' AND tt.timeout_seconds > 0
		   AND t.started_at < $1::timestamptz - make_interval(secs => tt.timeout_seconds)
		 ORDER BY t.started_at, t.id LIMIT $2`, db.Now(), limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("timed out tasks: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TimedOutTask, error) {
		var s TimedOutTask
		err := r.Scan(&s.ID, &s.WorkerID, &s.StartedAt, &s.TimeoutSeconds)
		s.StartedAt = s.StartedAt.UTC()
		return s, err
	})
	return out, mapErr(err)
}

// SystemFailure is a failure the system decides (stuck, timed out).
type SystemFailure struct {
	// StartedAt is when the attempt being failed began: if the task has
	// moved on since (finished, released and claimed again), nothing happens.
	StartedAt time.Time
	Kind      string
	Reason    string
	Evidence  json.RawMessage
	// Update is posted to the task's thread with the failure.
	Update string
}

var errMovedOn = errors.New("task moved on")

// FailInProgress fails the task with task.failed{kind, evidence} and the
// update, in one append, if it is still in the attempt that started at
// f.StartedAt. It reports whether it did.
func (db *DB) FailInProgress(ctx context.Context, id string, f SystemFailure, meta events.Meta) (bool, error) {
	updateID, err := uuid.NewV7()
	if err != nil {
		return false, err
	}
	_, _, err = db.UpdateTask(ctx, db.pool, id, meta, func(t *events.Task) ([]events.Payload, error) {
		if t.Status != events.StatusInProgress || t.StartedAt == nil || !t.StartedAt.Equal(f.StartedAt) {
			return nil, errMovedOn
		}
		ps, err := t.Fail("", f.Kind, f.Reason, f.Evidence)
		if err != nil || f.Update == "" {
			return ps, err
		}
		upd, err := t.PostUpdate(updateID.String(), "", f.Update, false)
		return append(ps, upd...), err
	})
	if errors.Is(err, errMovedOn) || errors.Is(err, events.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
