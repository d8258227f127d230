package projections

import (
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// ScheduleColumns are schedules' columns, in ScheduleRow order.
var ScheduleColumns = []string{
	"id", "name", "state", "task_type_id", "spec", "anchor", "next_due_at", "runs", "regular_runs",
	"skips", "fire_failures", "consecutive_fire_failures", "last_due_at", "last_fired_at",
	"resumed_after_run", "paused_reason", "auto_paused", "created_by", "created_at", "updated_at", "version",
}

// ScheduleRow is the schedules row of a folded schedule.
func ScheduleRow(s *events.Schedule) []any {
	spec, _ := json.Marshal(s.ScheduleSpec) // plain structs: cannot fail
	return []any{
		s.ID, s.Name, string(s.State), s.Task.TaskTypeID, string(spec), s.Anchor, s.NextDueAt, s.Runs, s.RegularRuns,
		s.Skips, s.FireFailures, s.ConsecutiveFireFailures, s.LastDueAt, s.LastFiredAt,
		s.ResumedAfterRun, s.PausedReason, s.AutoPaused, s.CreatedBy, s.CreatedAt, s.UpdatedAt, s.Version,
	}
}

var upsertSchedule = upsert("schedules", ScheduleColumns, map[string]string{"spec": "jsonb"})

// FiringColumns are schedule_firings' columns, in FiringRow order.
var FiringColumns = []string{"schedule_id", "version", "kind", "due_at", "at", "run", "task_id", "missed", "reason"}

// FiringRow is the schedule_firings row of a firing event; nil for other events.
func FiringRow(e events.Envelope) []any {
	switch p := e.Payload.(type) {
	case events.ScheduleFired:
		kind := "fired"
		if p.Manual {
			kind = "run"
		}
		return []any{e.StreamID, e.Version, kind, p.DueAt, e.OccurredAt, p.Run, p.TaskID, p.Missed, ""}
	case events.ScheduleSkipped:
		return []any{e.StreamID, e.Version, "skipped", p.DueAt, e.OccurredAt, nil, nil, p.Missed, p.Reason}
	case events.ScheduleFireFailed:
		return []any{e.StreamID, e.Version, "failed", p.DueAt, e.OccurredAt, nil, nil, p.Missed, p.Reason}
	}
	return nil
}

var insertFiring = `INSERT INTO schedule_firings (schedule_id, version, kind, due_at, at, run, task_id, missed, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// Schedule queues the writes for events appended to one schedule stream.
func (Projector) Schedule(b *pgx.Batch, _, s *events.Schedule, evs []events.Envelope) {
	b.Queue(upsertSchedule, ScheduleRow(s)...)
	for _, e := range evs {
		if row := FiringRow(e); row != nil {
			b.Queue(insertFiring, row...)
		}
	}
}
