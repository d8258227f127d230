package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// CheckpointColumns are task_checkpoints' columns, in CheckpointRow order.
var CheckpointColumns = []string{"task_id", "state", "size_bytes", "worker_id", "checkpointed_at", "saves", "version"}

// CheckpointRow is c's task_checkpoints row.
func CheckpointRow(c *events.TaskCheckpoint) []any {
	return []any{c.TaskID, string(c.State), c.SizeBytes, c.WorkerID, c.CheckpointedAt, c.Saves, c.Version}
}

// The latest checkpoint replaces the row and counts the save, as the fold
// does (events.TaskCheckpoint.ApplyCheckpoint).
const upsertCheckpoint = `INSERT INTO task_checkpoints (task_id, state, size_bytes, worker_id, checkpointed_at, saves, version)
VALUES ($1, $2::jsonb, $3, $4, $5, 1, $6)
ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, size_bytes = excluded.size_bytes,
    worker_id = excluded.worker_id, checkpointed_at = excluded.checkpointed_at,
    saves = task_checkpoints.saves + 1, version = excluded.version`

func queueTaskCheckpoint(b *pgx.Batch, e events.Envelope) {
	if p, ok := e.Payload.(events.TaskCheckpointed); ok {
		b.Queue(upsertCheckpoint, e.StreamID, string(p.State), p.SizeBytes, p.WorkerID, e.OccurredAt, e.Version)
	}
}
