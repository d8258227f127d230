package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
func (db *DB) FireDue(ctx context.Context, limit int, check ParamsCheck) ([]Firing, error) {
	var out []Firing
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = db.fireDue(ctx, tx, limit, check)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (db *DB) fireDue(ctx context.Context, tx pgx.Tx, limit int, check ParamsCheck) ([]Firing, error) {
	now := db.Now()
	rows, err := tx.Query(ctx, `SELECT `+scheduleColumns+` FROM schedules s
		WHERE s.state = 'active' AND s.next_due_at <= $1
		ORDER BY s.next_due_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("fire: lock due schedules: %w", err))
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*events.Schedule, error) { return scanSchedule(r) })
	if err != nil {
		return nil, mapErr(fmt.Errorf("fire: read due schedules: %w", err))
	}
	if len(due) == 0 {
		return nil, nil
	}
	types, blocking, err := db.firingFacts(ctx, tx, due)
	if err != nil {
		return nil, err
	}
	meta := events.Meta{Actor: events.System(SchedulerActor)}
	b := &pgx.Batch{}
	var evs []events.Envelope
	out := make([]Firing, 0, len(due))
	for _, s := range due {
		f, sevs, err := db.fireOne(b, s, now, meta, types, blocking[s.ID], check)
		if err != nil {
			return nil, fmt.Errorf("fire schedule %s: %w", s.ID, err)
		}
		if sevs == nil {
			continue
		}
		evs = append(evs, sevs...)
		out = append(out, f)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	if err := queueEvents(b, evs); err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, mapErr(fmt.Errorf("fire: write: %w", err))
	}
	db.onCommit(tx, func() { db.metrics.observe(evs, nil) })
	return out, nil
}

// fireOne decides one due schedule and queues its writes on b; it returns
// the events to append (nil when it turned out not to be due).
func (db *DB) fireOne(b *pgx.Batch, s *events.Schedule, now time.Time, meta events.Meta,
	types map[string]*events.TaskType, blockedBy string, check ParamsCheck,
) (Firing, []events.Envelope, error) {
	f := Firing{ScheduleID: s.ID}
	plan, err := PlanOf(s)
	if err != nil {
		// Its timing no longer parses (cannot happen with what Validate
		// accepted): pause it with the reason rather than fail the batch
		// and stop every other schedule.
		f.Kind, f.Reason, f.AutoPaused, f.DueAt = "failed", "its timing no longer parses: "+err.Error(), true, *s.NextDueAt
		ps, err := s.AutoPause(f.Reason, nil)
		if err != nil {
			return f, nil, err
		}
		_, sevs, err := projectStream(b, now, events.StreamSchedule, s.ID, s, ps, meta, db.projector.Schedule)
		return f, sevs, err
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
	if errors.As(err, &ve) && ve.Field != "" {
		field := ve.Field
		if !strings.HasPrefix(field, "task.") {
			field = "task." + field
		}
		return fmt.Sprintf("the template no longer makes a valid task: %s: %s", field, ve.Message)
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
