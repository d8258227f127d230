package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// UpdateColumns are worker_task_updates' columns, in UpdateRow order.
var UpdateColumns = []string{"id", "task_id", "author_id", "message", "created_at", "version"}

// UpdateRow is the thread row of a task.update_posted event, or nil.
func UpdateRow(e events.Envelope) []any {
	p, ok := e.Payload.(events.TaskUpdatePosted)
	if !ok {
		return nil
	}
	var author *string
	if p.AuthorID != "" {
		author = &p.AuthorID
	}
	return []any{p.UpdateID, e.StreamID, author, p.Message, e.OccurredAt, e.Version}
}

const insertUpdate = `INSERT INTO worker_task_updates (id, task_id, author_id, message, created_at, version)
VALUES ($1, $2, $3, $4, $5, $6)`

func queueTaskUpdate(b *pgx.Batch, e events.Envelope) {
	if row := UpdateRow(e); row != nil {
		b.Queue(insertUpdate, row...)
	}
}
