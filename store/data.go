package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

const dataColumns = `id, task_id, data_type, filename, key, size_bytes, sha256, content_type, uploaded_by, uploaded_at, uploads, version`

func scanData(r pgx.CollectableRow) (events.TaskData, error) {
	var d events.TaskData
	err := r.Scan(&d.ID, &d.TaskID, &d.DataType, &d.Filename, &d.Key, &d.Size, &d.SHA256, &d.ContentType,
		&d.UploadedBy, &d.UploadedAt, &d.Uploads, &d.Version)
	d.UploadedAt = d.UploadedAt.UTC()
	return d, err
}

// ListTaskData returns the data of the given tasks, by task, data type and
// filename.
func (db *DB) ListTaskData(ctx context.Context, taskIDs ...string) ([]events.TaskData, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+dataColumns+` FROM task_data WHERE task_id = ANY($1::uuid[])
		ORDER BY task_id, data_type, filename`, taskIDs)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list task data: %w", err))
	}
	out, err := pgx.CollectRows(rows, scanData)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list task data: %w", err))
	}
	if out == nil {
		out = []events.TaskData{}
	}
	return out, nil
}

// GetTaskData reads one object's index row; not found when there is none.
func (db *DB) GetTaskData(ctx context.Context, id string) (*events.TaskData, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+dataColumns+` FROM task_data WHERE id = $1`, id)
	if err != nil {
		return nil, mapErr(err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanData)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("data", id)
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return &d, nil
}

// TaskLineage returns the ids of task id and of its ancestors (the earlier
// attempts it retries), nearest first.
func (db *DB) TaskLineage(ctx context.Context, id string) ([]string, error) {
	rows, err := db.pool.Query(ctx, `WITH RECURSIVE up AS (
		SELECT id, parent_task_id, 0 AS depth FROM worker_tasks WHERE id = $1
		UNION ALL
		SELECT p.id, p.parent_task_id, up.depth + 1 FROM worker_tasks p JOIN up ON p.id = up.parent_task_id
		 WHERE up.depth < $2)
		SELECT id::text FROM up ORDER BY depth`, id, maxChainDepth)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, mapErr(err)
}

// DataUpload is a finished upload to record: the object is complete but
// not yet visible (not committed to its key).
type DataUpload struct {
	TaskID      string
	WorkerID    string
	DataType    string
	Filename    string
	Key         string
	Size        int64
	SHA256      string
	ContentType string
	// NewID is the data id to use if the name is new to the task.
	NewID string
	// MaxTaskBytes bounds the task's data in all (0: no bound).
	MaxTaskBytes int64
	// MaxTaskFiles bounds the number of the task's files (0: no bound).
	MaxTaskFiles int
}

// DataUsage is what a task's data takes besides one name: the bytes and
// the files.
type DataUsage struct {
	Bytes int64
	Files int
}

// TaskDataUsage sums a task's data, leaving out the object named
// dataType/filename (which an upload of that name replaces).
func (db *DB) TaskDataUsage(ctx context.Context, q Querier, taskID, dataType, filename string) (DataUsage, error) {
	var u DataUsage
	err := q.QueryRow(ctx, `SELECT coalesce(sum(size_bytes), 0)::bigint, count(*)::int FROM task_data
		WHERE task_id = $1 AND (data_type, filename) <> ($2, $3)`, taskID, dataType, filename).Scan(&u.Bytes, &u.Files)
	return u, mapErr(err)
}

// CheckUpload says whether workerID may upload to task id now (it holds
// the task and the task is in progress), before any byte is read.
func (db *DB) CheckUpload(ctx context.Context, taskID, workerID string) (*events.Task, error) {
	t, err := db.GetTask(ctx, db.pool, taskID)
	if err != nil {
		return nil, err
	}
	return t, t.CanUploadData(workerID)
}

// RecordDataUpload makes an upload visible. In one transaction it locks
// the task's row, decides (the worker still holds the task in progress,
// the task's bound holds), calls commit to complete the object at its key,
// and appends task.data_uploaded. The row lock keeps every other command on
// the task out until the event exists, so the object is only ever complete
// before its event; a crash between the two leaves an object without an
// event, which the orphan sweep removes.
func (db *DB) RecordDataUpload(ctx context.Context, p DataUpload, meta events.Meta, commit func(context.Context) error) (*events.TaskData, error) {
	var out *events.TaskData
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		t, err := db.lockTask(ctx, tx, p.TaskID)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+dataColumns+` FROM task_data
			WHERE task_id = $1 AND data_type = $2 AND filename = $3`, p.TaskID, p.DataType, p.Filename)
		if err != nil {
			return mapErr(err)
		}
		prev, err := pgx.CollectRows(rows, scanData)
		if err != nil {
			return mapErr(err)
		}
		ev := events.TaskDataUploaded{DataID: p.NewID, DataType: p.DataType, Filename: p.Filename, Key: p.Key,
			Size: p.Size, SHA256: p.SHA256, ContentType: p.ContentType, WorkerID: p.WorkerID}
		if len(prev) == 1 {
			ev.DataID = prev[0].ID
			ev.Replaced = &events.DataReplaced{Size: prev[0].Size, SHA256: prev[0].SHA256}
		}
		ps, err := t.UploadData(ev)
		if err != nil {
			return err
		}
		if p.MaxTaskBytes > 0 || p.MaxTaskFiles > 0 {
			others, err := db.TaskDataUsage(ctx, tx, p.TaskID, p.DataType, p.Filename)
			if err != nil {
				return err
			}
			if p.MaxTaskBytes > 0 && others.Bytes+p.Size > p.MaxTaskBytes {
				return events.TooLarge("body", "the task's data would reach %d bytes; at most %d bytes per task", others.Bytes+p.Size, p.MaxTaskBytes)
			}
			if p.MaxTaskFiles > 0 && others.Files >= p.MaxTaskFiles {
				return events.TooLarge("body", "the task has %d files; at most %d files per task", others.Files, p.MaxTaskFiles)
			}
		}
		if err := commit(ctx); err != nil {
			return fmt.Errorf("complete the object: %w", err)
		}
		_, evs, err := db.appendTask(ctx, tx, p.TaskID, t, ps, meta)
		if err != nil {
			return err
		}
		d := events.TaskData{}
		if len(prev) == 1 {
			d = prev[0]
		}
		d.ApplyUpload(evs[0], ev)
		out = &d
		return nil
	})
	return out, err
}

// lockTask reads a task's row FOR UPDATE.
func (db *DB) lockTask(ctx context.Context, tx pgx.Tx, id string) (*events.Task, error) {
	var t events.Task
	err := tx.QueryRow(ctx, `SELECT `+taskColumns+` FROM worker_tasks t WHERE t.id = $1 FOR UPDATE`, id).Scan(taskDest(&t)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("task", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("lock task: %w", err))
	}
	normalizeTask(&t)
	return &t, nil
}

// DataFinishedBefore lists the data of tasks that finished before cutoff,
// at most limit rows, oldest tasks first: what a retention prune deletes.
func (db *DB) DataFinishedBefore(ctx context.Context, cutoff time.Time, limit int) ([]events.TaskData, error) {
	rows, err := db.pool.Query(ctx, `SELECT d.id, d.task_id, d.data_type, d.filename, d.key, d.size_bytes, d.sha256,
		d.content_type, d.uploaded_by, d.uploaded_at, d.uploads, d.version
		FROM task_data d JOIN worker_tasks t ON t.id = d.task_id
		WHERE t.status IN ('completed', 'failed', 'cancelled') AND t.completed_at < $1
		ORDER BY t.completed_at, d.id LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, scanData)
	return out, mapErr(err)
}

// RecordDataDeleted appends task.data_deleted for d (the task must have
// finished); the row disappears with it.
func (db *DB) RecordDataDeleted(ctx context.Context, d events.TaskData, reason string, meta events.Meta) error {
	_, _, err := db.UpdateTask(ctx, db.pool, d.TaskID, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.DeleteData(events.TaskDataDeleted{DataID: d.ID, Key: d.Key, Reason: reason})
	})
	return err
}

// IndexedKeys returns which of keys the data index names.
func (db *DB) IndexedKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	rows, err := db.pool.Query(ctx, `SELECT key FROM task_data WHERE key = ANY($1)`, keys)
	if err != nil {
		return nil, mapErr(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr(err)
	}
	out := make(map[string]bool, len(found))
	for _, k := range found {
		out[k] = true
	}
	return out, nil
}

// EachTaskData calls fn for every indexed object, in id order, a page at a time.
func (db *DB) EachTaskData(ctx context.Context, fn func(events.TaskData) error) error {
	after := "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := db.pool.Query(ctx, `SELECT `+dataColumns+` FROM task_data WHERE id > $1 ORDER BY id LIMIT 500`, after)
		if err != nil {
			return mapErr(err)
		}
		page, err := pgx.CollectRows(rows, scanData)
		if err != nil {
			return mapErr(err)
		}
		for _, d := range page {
			if err := fn(d); err != nil {
				return err
			}
		}
		if len(page) < 500 {
			return nil
		}
		after = page[len(page)-1].ID
	}
}
