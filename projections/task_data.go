package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// DataColumns are task_data's columns, in DataRow order.
var DataColumns = []string{"id", "task_id", "data_type", "filename", "key", "size_bytes", "sha256",
	"content_type", "uploaded_by", "uploaded_at", "uploads", "version"}

// DataRow is d's task_data row.
func DataRow(d *events.TaskData) []any {
	return []any{d.ID, d.TaskID, d.DataType, d.Filename, d.Key, d.Size, d.SHA256,
		d.ContentType, d.UploadedBy, d.UploadedAt, d.Uploads, d.Version}
}

// A replacement keeps the row (and its id) and counts the upload, as the
// fold does (events.TaskData.ApplyUpload).
const upsertData = `INSERT INTO task_data (id, task_id, data_type, filename, key, size_bytes, sha256,
    content_type, uploaded_by, uploaded_at, uploads, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11)
ON CONFLICT (id) DO UPDATE SET key = excluded.key, size_bytes = excluded.size_bytes,
    sha256 = excluded.sha256, content_type = excluded.content_type, uploaded_by = excluded.uploaded_by,
    uploaded_at = excluded.uploaded_at, uploads = task_data.uploads + 1, version = excluded.version`

func queueTaskData(b *pgx.Batch, e events.Envelope) {
	switch p := e.Payload.(type) {
	case events.TaskDataUploaded:
		b.Queue(upsertData, p.DataID, e.StreamID, p.DataType, p.Filename, p.Key, p.Size, p.SHA256,
			p.ContentType, p.WorkerID, e.OccurredAt, e.Version)
	case events.TaskDataDeleted:
		b.Queue(`DELETE FROM task_data WHERE id = $1`, p.DataID)
	}
}
