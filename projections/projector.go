package projections

import (
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Projector writes every read model; the store calls it inside Append.
type Projector struct{}

// Task queues the writes for events appended to one task stream, given the
// task before them (nil for a new task) and after. The counts' delta goes
// right after the task's row: the order replay's swap locks them in.
func (Projector) Task(b *pgx.Batch, before, t *events.Task, evs []events.Envelope) {
	queueTask(b, before, t)
	queueCounts(b, before, t)
	queueScheduleCounts(b, before, t)
	for _, e := range evs {
		queueWorkerDay(b, e)
		queueMinute(b, e)
		queueUsage(b, e)
	}
	queueTaskTitle(b, before, t)
	queueKeyTask(b, before, t)
	for _, e := range evs {
		queueTaskUpdate(b, e)
		queueTaskAssignment(b, e)
		queueTaskData(b, e)
		queueTaskCheckpoint(b, e)
		queueCompaction(b, e)
	}
}

// TaskType queues the write of a task type's row and, when its controls
// changed what its tasks copy from it, locks the type first and regates
// its open tasks after (see regateTasks).
func (Projector) TaskType(b *pgx.Batch, before, tt *events.TaskType, _ []events.Envelope) {
	regate := before != nil && (before.Gated() != tt.Gated() || !slices.Equal(before.KeyPath(), tt.KeyPath()))
	if regate {
		b.Queue(lockTypeForGate, tt.ID)
	}
	queueTaskType(b, tt)
	if regate {
		b.Queue(regateTasks, tt.ID)
	}
}

// User queues the write of a user's row.
func (Projector) User(b *pgx.Batch, _, u *events.User, _ []events.Envelope) {
	queueUser(b, u)
}
