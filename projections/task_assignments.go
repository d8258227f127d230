package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// AssignmentColumns are task_assignments' columns, in AssignmentRow order.
var AssignmentColumns = []string{"task_id", "version", "worker_id", "assigned_by", "kind", "reason", "at"}

// AssignmentRow is the row of an assignment, claim or release, or nil.
func AssignmentRow(e events.Envelope) []any {
	var worker, by, kind, reason string
	switch p := e.Payload.(type) {
	case events.TaskAssigned:
		worker, by, kind, reason = p.WorkerID, p.By, "assigned", p.Reason
	case events.TaskClaimed:
		worker, by, kind = p.WorkerID, p.WorkerID, "claimed"
	case events.TaskReleased:
		worker, by, kind, reason = p.WorkerID, e.Meta.Actor.ID, "released", p.Reason
	default:
		return nil
	}
	var assignedBy *string
	if by != "" && e.Meta.Actor.Kind != events.ActorSystem {
		assignedBy = &by
	}
	return []any{e.StreamID, e.Version, worker, assignedBy, kind, reason, e.OccurredAt}
}

const insertAssignment = `INSERT INTO task_assignments (task_id, version, worker_id, assigned_by, kind, reason, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

func queueTaskAssignment(b *pgx.Batch, e events.Envelope) {
	if row := AssignmentRow(e); row != nil {
		b.Queue(insertAssignment, row...)
	}
}
