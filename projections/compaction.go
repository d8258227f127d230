package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// A compaction (events.TaskCompacted) drops the rows of the payloads it
// does not keep: the thread, the claim history (kept as attempts in the
// event) and the checkpoint. Later rows (an admin's comment after it) stay.
const (
	dropCompactedUpdates     = `DELETE FROM worker_task_updates WHERE task_id = $1 AND version < $2`
	dropCompactedAssignments = `DELETE FROM task_assignments WHERE task_id = $1 AND version < $2`
	dropCompactedCheckpoint  = `DELETE FROM task_checkpoints WHERE task_id = $1 AND version < $2`
)

func queueCompaction(b *pgx.Batch, e events.Envelope) {
	if _, ok := e.Payload.(events.TaskCompacted); !ok {
		return
	}
	for _, q := range []string{dropCompactedUpdates, dropCompactedAssignments, dropCompactedCheckpoint} {
		b.Queue(q, e.StreamID, e.Version)
	}
}
