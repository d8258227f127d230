package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/timing"
)

// ParamsCheck validates a template's params against its type's JSON Schema
// (the API's validator); its error names the JSON path ("params.ticker").
type ParamsCheck func(tt *events.TaskType, params json.RawMessage) error

const scheduleColumns = `s.id, s.spec, s.state, s.anchor, s.next_due_at, s.runs, s.regular_runs, s.skips,
 s.fire_failures, s.consecutive_fire_failures, s.last_due_at, s.last_fired_at, s.resumed_after_run,
 s.paused_reason, s.auto_paused, s.created_by, s.created_at, s.updated_at, s.version`

// scanSchedule reads one scheduleColumns row.
func scanSchedule(row pgx.Row) (*events.Schedule, error) {
	var s events.Schedule
	var spec []byte
	err := row.Scan(&s.ID, &spec, &s.State, &s.Anchor, &s.NextDueAt, &s.Runs, &s.RegularRuns, &s.Skips,
		&s.FireFailures, &s.ConsecutiveFireFailures, &s.LastDueAt, &s.LastFiredAt, &s.ResumedAfterRun,
		&s.PausedReason, &s.AutoPaused, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt, &s.Version)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(spec, &s.ScheduleSpec); err != nil {
		return nil, fmt.Errorf("schedule %s: spec: %w", s.ID, err)
	}
	normalizeSchedule(&s)
	return &s, nil
}

// normalizeSchedule makes timestamps UTC so a read row equals the fold.
func normalizeSchedule(s *events.Schedule) {
	s.Anchor, s.CreatedAt, s.UpdatedAt = s.Anchor.UTC(), s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	for _, p := range []**time.Time{&s.NextDueAt, &s.LastDueAt, &s.LastFiredAt, &s.StartAt, &s.EndAt} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
}

// GetSchedule reads one schedule; a *events.NotFoundError when there is none.
func (db *DB) GetSchedule(ctx context.Context, q Querier, id string) (*events.Schedule, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, events.NotFound("schedule", id)
	}
	s, err := scanSchedule(q.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules s WHERE s.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("schedule", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("get schedule: %w", err))
	}
	return s, nil
}

// lockSchedule reads a schedule FOR UPDATE in the caller's transaction.
func (db *DB) lockSchedule(ctx context.Context, tx pgx.Tx, id string) (*events.Schedule, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, events.NotFound("schedule", id)
	}
	s, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM schedules s WHERE s.id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("schedule", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("lock schedule: %w", err))
	}
	return s, nil
}

// ScheduleFilter selects schedules for a list, newest first.
type ScheduleFilter struct {
	State      events.ScheduleState
	TaskTypeID string
	// After is the last id of the previous page (keyset).
	After string
	Limit int
}

// ListSchedules lists schedules, newest first, a page at a time.
func (db *DB) ListSchedules(ctx context.Context, f ScheduleFilter) ([]*events.Schedule, error) {
	where := []string{"true"}
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if f.State != "" {
		where = append(where, "s.state = "+arg(string(f.State)))
	}
	if f.TaskTypeID != "" {
		where = append(where, "s.task_type_id = "+arg(f.TaskTypeID)+"::uuid")
	}
	if f.After != "" {
		p := arg(f.After)
		where = append(where, fmt.Sprintf("(s.created_at, s.id) < (SELECT created_at, id FROM schedules WHERE id = %s::uuid)", p))
	}
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	rows, err := db.pool.Query(ctx, `SELECT `+scheduleColumns+` FROM schedules s WHERE `+strings.Join(where, " AND ")+
		` ORDER BY s.created_at DESC, s.id DESC LIMIT `+arg(f.Limit), args...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list schedules: %w", err))
	}
	defer rows.Close()
	out := []*events.Schedule{}
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		out = append(out, s)
	}
	return out, mapErr(rows.Err())
}

// PlanOf is the plan of a schedule's current timing.
func PlanOf(s *events.Schedule) (*timing.Plan, error) { return timing.New(s.ScheduleTiming, s.Anchor) }

// checkScheduleSpec validates a spec (defaults filled), its type (exists,
// not archived), its params (check) and its assignee, and builds its plan.
// Every error is a validation error naming the field at fault.
func (db *DB) checkScheduleSpec(ctx context.Context, q Querier, spec *events.ScheduleSpec, check ParamsCheck, anchor func(events.ScheduleTiming) time.Time) (*timing.Plan, time.Time, error) {
	if err := spec.Validate(db.scheduleMinInterval); err != nil {
		return nil, time.Time{}, err
	}
	typeID, err := uuid.Parse(spec.Task.TaskTypeID)
	if err != nil {
		return nil, time.Time{}, events.Invalid("task.task_type_id", "is not a UUID")
	}
	spec.Task.TaskTypeID = typeID.String()
	tt, err := db.GetTaskType(ctx, q, spec.Task.TaskTypeID)
	if errors.Is(err, events.ErrNotFound) {
		return nil, time.Time{}, events.UnknownReference("task.task_type_id", "task type", spec.Task.TaskTypeID)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := templateFits(tt, spec.Task.Params, check); err != nil {
		if field, named := events.FieldOf(err); named && !strings.HasPrefix(field, "task.") {
			return nil, time.Time{}, events.Under("task", err)
		}
		return nil, time.Time{}, err
	}
	if a := spec.Task.AssignedTo; a != "" {
		worker, err := uuid.Parse(a)
		if err != nil {
			return nil, time.Time{}, events.Invalid("task.assigned_to", "is not a UUID")
		}
		a = worker.String()
		spec.Task.AssignedTo = a
		if err := db.checkWorker(ctx, q, a, "task.assigned_to"); err != nil {
			return nil, time.Time{}, err
		}
	}
	at := anchor(spec.ScheduleTiming)
	plan, err := timing.New(spec.ScheduleTiming, at)
	return plan, at, err
}

// templateFits checks that a template makes a valid task of type tt.
func templateFits(tt *events.TaskType, params json.RawMessage, check ParamsCheck) error {
	if tt == nil {
		return events.Invalid("task_type_id", "the task type no longer exists")
	}
	if tt.Archived {
		return events.Unusable("task_type_id", "task type %s is archived", tt.Name)
	}
	if check != nil {
		return check(tt, params)
	}
	return nil
}

// CreateSchedule defines a schedule. check validates the template's params
// against its type's schema.
func (db *DB) CreateSchedule(ctx context.Context, spec events.ScheduleSpec, check ParamsCheck, meta events.Meta) (*events.Schedule, error) {
	now := db.Now()
	plan, _, err := db.checkScheduleSpec(ctx, db.pool, &spec, check, func(t events.ScheduleTiming) time.Time { return t.Anchor(now) })
	if err != nil {
		return nil, err
	}
	by := ""
	if meta.Actor.Kind == events.ActorAdmin {
		by = meta.Actor.ID
	}
	ps, err := events.NewSchedule(spec, plan, now, by)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	s, _, err := appendStream(ctx, db, db.pool, events.StreamSchedule, id.String(), nil, ps, meta, db.projector.Schedule, nil)
	return s, err
}

// ScheduleDecision decides a command on the locked current state of a schedule.
type ScheduleDecision func(s *events.Schedule, now time.Time) ([]events.Payload, error)

// ChangeSchedule runs one command (pause, resume, cancel) on schedule id in
// one transaction: lock the row, decide, append.
func (db *DB) ChangeSchedule(ctx context.Context, id string, meta events.Meta, decide ScheduleDecision) (*events.Schedule, error) {
	var after *events.Schedule
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		s, err := db.lockSchedule(ctx, tx, id)
		if err != nil {
			return err
		}
		ps, err := decide(s, db.Now())
		if err != nil {
			return err
		}
		after, _, err = appendStream(ctx, db, tx, events.StreamSchedule, id, s, ps, meta, db.projector.Schedule, nil)
		return err
	})
	return after, err
}

// PauseSchedule, ResumeSchedule and CancelSchedule are the admin's actions.
func (db *DB) PauseSchedule(ctx context.Context, id, reason string, meta events.Meta) (*events.Schedule, error) {
	return db.ChangeSchedule(ctx, id, meta, func(s *events.Schedule, _ time.Time) ([]events.Payload, error) {
		return s.Pause(meta.Actor.ID, reason)
	})
}

func (db *DB) ResumeSchedule(ctx context.Context, id string, meta events.Meta) (*events.Schedule, error) {
	return db.ChangeSchedule(ctx, id, meta, func(s *events.Schedule, now time.Time) ([]events.Payload, error) {
		plan, err := PlanOf(s)
		if err != nil {
			return nil, err
		}
		return s.Resume(plan, now, meta.Actor.ID)
	})
}

func (db *DB) CancelSchedule(ctx context.Context, id, reason string, meta events.Meta) (*events.Schedule, error) {
	return db.ChangeSchedule(ctx, id, meta, func(s *events.Schedule, _ time.Time) ([]events.Payload, error) {
		return s.Cancel(meta.Actor.ID, reason)
	})
}

// UpdateSchedule edits schedule id: edit changes a copy of its spec (the
// API decodes the request over it), which is then checked like a new one.
func (db *DB) UpdateSchedule(ctx context.Context, id string, edit func(*events.ScheduleSpec) error, check ParamsCheck, meta events.Meta) (*events.Schedule, error) {
	var after *events.Schedule
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		s, err := db.lockSchedule(ctx, tx, id)
		if err != nil {
			return err
		}
		if s.State == events.ScheduleStateCancelled {
			return &events.ScheduleTransitionError{Command: "update", State: s.State}
		}
		spec := s.ScheduleSpec
		spec.Task.Params = append(json.RawMessage(nil), spec.Task.Params...)
		if spec.Interval != nil {
			i := *spec.Interval
			spec.Interval = &i
		}
		if err := edit(&spec); err != nil {
			return err
		}
		now := db.Now()
		timingChanged := func(t events.ScheduleTiming) time.Time {
			a, _ := json.Marshal(t)
			b, _ := json.Marshal(s.ScheduleTiming)
			if string(a) == string(b) {
				return s.Anchor
			}
			return t.Anchor(now)
		}
		plan, anchor, err := db.checkScheduleSpec(ctx, tx, &spec, check, timingChanged)
		if err != nil {
			return err
		}
		ps, err := s.Update(spec, plan, anchor, now, meta.Actor.ID)
		if err != nil {
			return err
		}
		after, _, err = appendStream(ctx, db, tx, events.StreamSchedule, id, s, ps, meta, db.projector.Schedule, nil)
		return err
	})
	return after, err
}

// RunScheduleNow fires an extra execution of schedule id at once: its task
// and schedule.fired (manual) in one transaction. The regular slots stay.
func (db *DB) RunScheduleNow(ctx context.Context, id string, check ParamsCheck, meta events.Meta) (*events.Schedule, *events.Task, error) {
	var after *events.Schedule
	var task *events.Task
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		s, err := db.lockSchedule(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := s.RunNow("", time.Time{}, ""); err != nil {
			return err
		}
		tt, err := db.GetTaskType(ctx, tx, s.Task.TaskTypeID)
		if err != nil && !errors.Is(err, events.ErrNotFound) {
			return err
		}
		if err := templateFits(tt, s.Task.Params, check); err != nil {
			return fmt.Errorf("%w: the schedule's template no longer makes a valid task: %w", events.ErrInvalid, err)
		}
		now := db.Now()
		taskID, err := uuid.NewV7()
		if err != nil {
			return err
		}
		ps, err := s.RunNow(taskID.String(), now, meta.Actor.ID)
		if err != nil {
			return err
		}
		taskPs, err := events.NewTask(s.TaskParams(s.Runs+1), tt)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		var tevs []events.Envelope
		task, tevs, err = projectStream(b, now, events.StreamTask, taskID.String(), nil, taskPs, meta, db.projector.Task)
		if err != nil {
			return err
		}
		var sevs []events.Envelope
		after, sevs, err = projectStream(b, now, events.StreamSchedule, id, s, ps, meta, db.projector.Schedule)
		if err != nil {
			return err
		}
		evs := append(sevs, tevs...)
		if err := queueEvents(b, evs); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return mapErr(err)
		}
		db.wrote(tx, evs, nil)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return after, task, nil
}

// PauseFailingSchedule pauses schedule id, in the caller's transaction,
// when its latest MaxFailures finished executions (since its last resume)
// all ended failed; the event carries them as evidence. It reports whether
// it paused. causationSeq is the event that ended the last failure.
func (db *DB) PauseFailingSchedule(ctx context.Context, tx pgx.Tx, id string, causationSeq int64) (bool, error) {
	s, err := db.lockSchedule(ctx, tx, id)
	if errors.Is(err, events.ErrNotFound) {
		return false, nil
	}
	if err != nil || s.State != events.ScheduleStateActive || s.MaxFailures == 0 {
		return false, err
	}
	streak, evidence, err := db.RecentFailedStreak(ctx, tx, id, s.ResumedAfterRun, s.MaxFailures)
	if err != nil || streak < s.MaxFailures {
		return false, err
	}
	proof, err := json.Marshal(map[string]any{"failed_executions": evidence})
	if err != nil {
		return false, err
	}
	reason := fmt.Sprintf("%d executions in a row ended failed; the last: %s", streak, lastReason(evidence))
	ps, err := s.AutoPause(reason, proof)
	if err != nil {
		return false, err
	}
	meta := events.Meta{Actor: events.System(SchedulerActor), CausationSeq: causationSeq, CorrelationID: id}
	_, _, err = appendStream(ctx, db, tx, events.StreamSchedule, id, s, ps, meta, db.projector.Schedule, nil)
	return err == nil, err
}

func lastReason(exs []Execution) string {
	if len(exs) == 0 || exs[0].FailureReason == nil {
		return "no reason recorded"
	}
	return *exs[0].FailureReason
}
