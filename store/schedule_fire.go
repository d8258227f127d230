package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/clawdbot/task-service/events"
)

// SchedulerActor is the actor of every firing.
const SchedulerActor = "scheduler"

// Firing is what one due schedule came to.
type Firing struct {
	ScheduleID string
	// Kind is fired, skipped or failed.
	Kind   string
	DueAt  time.Time
	Missed int
	TaskID string
	Reason string
	// AutoPaused: the firing failed once too often in a row and paused
	// the schedule.
	AutoPaused bool
}

// NextDue is the earliest due time of an active schedule; nil when none.
func (db *DB) NextDue(ctx context.Context) (*time.Time, error) {
	var next *time.Time
	err := db.pool.QueryRow(ctx, `SELECT min(next_due_at) FROM schedules WHERE state = 'active'`).Scan(&next)
	if err != nil {
		return nil, mapErr(fmt.Errorf("next due schedule: %w", err))
	}
	return next, nil
}

// FireDue handles up to limit schedules due at the store's now, in one
// transaction: their rows are locked FOR UPDATE SKIP LOCKED (another
// instance firing others at the same moment takes the rest), each is fired
// (schedule.fired and its task's task.created), skipped (overlap policy) or
// recorded as fire_failed, and everything commits together. The unique
// index on schedule_firings (schedule_id, due_at) is the backstop: a second
// firing of one due time fails and rolls back.
//
// One schedule never stops the others (DESIGN §15): a schedule whose firing
// cannot be decided or written is recorded as failed and paused, alone. When
// the database refuses the batch's writes for what they hold, the same
// schedules are fired one per transaction, and the one refused is paused.
func (db *DB) FireDue(ctx context.Context, limit int, check ParamsCheck) ([]Firing, error) {
	out, due, err := db.fireBatch(ctx, limit, check, nil)
	var refused *refusedError
	if !errors.As(err, &refused) {
		return out, err
	}
	out = nil
	var errs []error
	for _, id := range due {
		fired, _, err := db.fireBatch(ctx, 1, check, []string{id})
		if errors.As(err, &refused) {
			var f Firing
			if f, err = db.pauseRefused(ctx, id, refused.cause); err == nil {
				fired = []Firing{f}
			}
		}
		if err != nil {
			// Even then, the schedules after this one fire.
			errs = append(errs, err)
			continue
		}
		out = append(out, fired...)
	}
	return out, errors.Join(errs...)
}

// refusedError is a firing batch whose writes the database refused for
// what they hold (a constraint, a value out of range; cause), as opposed to
// being unavailable or contended: some schedule's stored state is at fault.
type refusedError struct{ cause error }

func (e *refusedError) Error() string {
	return "fire: the database refused the writes: " + e.cause.Error()
}
func (e *refusedError) Unwrap() error { return e.cause }

// fireBatch runs fireDue in a transaction of its own; it returns the ids of
// the schedules it locked even when it fails.
func (db *DB) fireBatch(ctx context.Context, limit int, check ParamsCheck, only []string) ([]Firing, []string, error) {
	var out []Firing
	var due []string
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, due, err = db.fireDue(ctx, tx, limit, check, only)
		return err
	})
	if err != nil {
		return nil, due, err
	}
	return out, due, nil
}

// pauseRefused pauses schedule id, whose firing the database refused
// (cause), with the reason; it writes no firing row, which may be what was
// refused.
func (db *DB) pauseRefused(ctx context.Context, id string, cause error) (Firing, error) {
	f := Firing{ScheduleID: id, Kind: "failed", Reason: "the database refused its firing: " + cause.Error()}
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		s, err := db.lockSchedule(ctx, tx, id)
		if err != nil || s.State != events.ScheduleStateActive {
			return err
		}
		if s.NextDueAt != nil {
			f.DueAt = *s.NextDueAt
		}
		ps, err := s.AutoPause(f.Reason, nil)
		if err != nil {
			return err
		}
		meta := events.Meta{Actor: events.System(SchedulerActor), CorrelationID: id}
		_, _, err = appendStream(ctx, db, tx, events.StreamSchedule, id, s, ps, meta, db.projector.Schedule, nil)
		f.AutoPaused = err == nil
		return err
	})
	if err != nil {
		return f, fmt.Errorf("pause schedule %s after %w: %w", id, cause, err)
	}
	return f, nil
}

const lockDueSQL = `SELECT ` + scheduleColumns + ` FROM schedules s
	WHERE s.state = 'active' AND s.next_due_at <= $1 %s
	ORDER BY s.next_due_at LIMIT $2 FOR UPDATE SKIP LOCKED`

// fireDue fires the due schedules (only those in only, when given) in tx;
// it returns the firings and the ids of the schedules it locked.
func (db *DB) fireDue(ctx context.Context, tx pgx.Tx, limit int, check ParamsCheck, only []string) ([]Firing, []string, error) {
	now := db.Now()
	filter, args := "", []any{now, limit}
	if only != nil {
		filter, args = "AND s.id = ANY($3::uuid[])", append(args, only)
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(lockDueSQL, filter), args...)
	if err != nil {
		return nil, nil, mapErr(fmt.Errorf("fire: lock due schedules: %w", err))
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*events.Schedule, error) { return scanSchedule(r) })
	if err != nil {
		return nil, nil, mapErr(fmt.Errorf("fire: read due schedules: %w", err))
	}
	if len(due) == 0 {
		return nil, nil, nil
	}
	ids := make([]string, len(due))
	for i, s := range due {
		ids[i] = s.ID
	}
	types, blocking, err := db.firingFacts(ctx, tx, due)
	if err != nil {
		return nil, ids, err
	}
	meta := events.Meta{Actor: events.System(SchedulerActor)}
	b := &pgx.Batch{}
	var evs []events.Envelope
	out := make([]Firing, 0, len(due))
	for _, s := range due {
		// Each schedule's writes are queued on a batch of its own first, so
		// a schedule that fails half-way leaves nothing behind in b.
		one := &pgx.Batch{}
		f, sevs, err := db.fireOne(one, s, now, meta, types, blocking[s.ID], check)
		if err != nil {
			one = &pgx.Batch{}
			f, sevs, err = db.failAlone(one, s, now, meta, err)
		}
		if err != nil {
			// Not even its failure can be recorded: leave it, fire the others.
			f.AutoPaused = false
			out = append(out, f)
			continue
		}
		if sevs == nil {
			continue
		}
		b.QueuedQueries = append(b.QueuedQueries, one.QueuedQueries...)
		evs = append(evs, sevs...)
		out = append(out, f)
	}
	if len(evs) == 0 {
		return out, ids, nil
	}
	if err := queueEvents(b, evs); err != nil {
		return nil, ids, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		if refusedData(err) {
			return nil, ids, &refusedError{cause: mapErr(err)}
		}
		return nil, ids, mapErr(fmt.Errorf("fire: write: %w", err))
	}
	db.wrote(tx, evs, nil)
	return out, ids, nil
}

// refusedData reports whether PostgreSQL refused a statement for the data
// it carries: an integrity constraint (class 23) or a value it cannot hold
// (class 22), not a conflict between transactions or an outage.
func refusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23"))
}

// failAlone records, on b, that schedule s could not be fired (cause) and
// pauses it (events.Schedule.FailAlone).
func (db *DB) failAlone(b *pgx.Batch, s *events.Schedule, now time.Time, meta events.Meta, cause error) (Firing, []events.Envelope, error) {
	f := Firing{ScheduleID: s.ID, Kind: "failed", Reason: "its firing failed: " + cause.Error(), AutoPaused: true}
	if s.NextDueAt != nil {
		f.DueAt = *s.NextDueAt
	}
	var ve *events.ValidationError
	if errors.As(cause, &ve) {
		f.Reason = "its timing is no longer valid: " + ve.Error()
	}
	ps, err := s.FailAlone(f.Reason)
	if err != nil {
		return f, nil, err
	}
	meta.CorrelationID = s.ID
	_, sevs, err := projectStream(b, now, events.StreamSchedule, s.ID, s, ps, meta, db.projector.Schedule)
	if err != nil {
		return f, nil, fmt.Errorf("schedule %s: %w", s.ID, err)
	}
	return f, sevs, nil
}

// fireOne decides one due schedule and queues its writes on b; it returns
// the events to append (nil when it turned out not to be due). An error is
// this schedule's alone.
func (db *DB) fireOne(b *pgx.Batch, s *events.Schedule, now time.Time, meta events.Meta,
	types map[string]*events.TaskType, blockedBy string, check ParamsCheck,
) (Firing, []events.Envelope, error) {
	f := Firing{ScheduleID: s.ID}
	plan, err := PlanOf(s)
	if err != nil {
		return f, nil, err
	}
	slot, ok := s.DueSlot(plan, now)
	if !ok {
		return f, nil, nil
	}
	f.DueAt, f.Missed = slot.Due, slot.Missed
	meta.CorrelationID = s.ID
	var ps []events.Payload
	var taskEvs []events.Envelope
	tt := types[s.Task.TaskTypeID]
	switch {
	case s.Overlap == events.OverlapSkip && blockedBy != "":
		f.Kind, f.Reason = "skipped", fmt.Sprintf("execution #%d has not ended (task %s)", s.Runs, blockedBy)
		ps, err = s.Skip(plan, slot, now, blockedBy, f.Reason)
	default:
		var taskPs []events.Payload
		if err = templateFits(tt, s.Task.Params, check); err == nil {
			taskPs, err = events.NewTask(s.TaskParams(s.Runs+1), tt)
		}
		if err != nil {
			// The template no longer makes a valid task (type archived,
			// schema changed): record it and go on with the next schedule.
			f.Kind, f.Reason = "failed", fireFailure(err)
			ps, err = s.FailFiring(plan, slot, now, f.Reason)
			for _, p := range ps {
				if pp, ok := p.(events.SchedulePaused); ok && pp.Auto {
					f.AutoPaused = true
				}
			}
			break
		}
		id, uerr := uuid.NewV7()
		if uerr != nil {
			return f, nil, uerr
		}
		f.Kind, f.TaskID = "fired", id.String()
		if ps, err = s.Fire(plan, slot, now, f.TaskID); err != nil {
			break
		}
		_, taskEvs, err = projectStream(b, now, events.StreamTask, f.TaskID, nil, taskPs, meta, db.projector.Task)
	}
	if err != nil {
		return f, nil, err
	}
	_, sevs, err := projectStream(b, now, events.StreamSchedule, s.ID, s, ps, meta, db.projector.Schedule)
	if err != nil {
		return f, nil, err
	}
	return f, append(sevs, taskEvs...), nil
}

// fireFailure is the reason recorded when a template no longer fits.
func fireFailure(err error) string {
	var ve *events.ValidationError
	var se *events.StateError // an archived type
	var field, message string
	switch {
	case errors.As(err, &ve):
		field, message = ve.Field, ve.Message
	case errors.As(err, &se):
		field, message = se.Field, se.Message
	}
	if field != "" {
		if !strings.HasPrefix(field, "task.") {
			field = "task." + field
		}
		return fmt.Sprintf("the template no longer makes a valid task: %s: %s", field, message)
	}
	return "the template no longer makes a valid task: " + err.Error()
}

// firingFacts reads, in one round trip, the task types of the due
// schedules and, for those whose overlap policy is skip, a task of their
// latest execution that has not ended (pending, in progress, or failed
// with its retry not decided yet).
func (db *DB) firingFacts(ctx context.Context, tx pgx.Tx, due []*events.Schedule) (map[string]*events.TaskType, map[string]string, error) {
	var typeIDs, skipIDs []string
	var skipRuns []int32
	for _, s := range due {
		typeIDs = append(typeIDs, s.Task.TaskTypeID)
		if s.Overlap == events.OverlapSkip && s.Runs > 0 {
			skipIDs, skipRuns = append(skipIDs, s.ID), append(skipRuns, int32(s.Runs))
		}
	}
	types := map[string]*events.TaskType{}
	blocking := map[string]string{}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+taskTypeColumns+` FROM task_types tt WHERE tt.id = ANY($1::uuid[])`, typeIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			tt := &events.TaskType{}
			if err := rows.Scan(taskTypeDest(tt)...); err != nil {
				return err
			}
			tt.CreatedAt, tt.UpdatedAt = tt.CreatedAt.UTC(), tt.UpdatedAt.UTC()
			types[tt.ID] = tt
		}
		return rows.Err()
	})
	if len(skipIDs) > 0 {
		b.Queue(`SELECT DISTINCT ON (w.schedule_id) w.schedule_id::text, w.id::text
			FROM unnest($1::uuid[], $2::int[]) AS s(id, run)
			JOIN worker_tasks w ON w.schedule_id = s.id AND w.schedule_run = s.run
			WHERE w.status IN ('pending', 'in_progress') OR (w.status = 'failed' AND w.retry_outcome IS NULL)
			ORDER BY w.schedule_id, w.retry_count DESC`, skipIDs, skipRuns).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var sid, tid string
				if err := rows.Scan(&sid, &tid); err != nil {
					return err
				}
				blocking[sid] = tid
			}
			return rows.Err()
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, mapErr(fmt.Errorf("fire: read types and running executions: %w", err))
	}
	return types, blocking, nil
}
