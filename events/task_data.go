package events

import (
	"fmt"
	"regexp"
	"time"
)

// Task data: files a worker uploads while it holds a task. The objects live
// in a blob store; these events are the index, written only once an object
// is complete (DESIGN §12).

// TaskDataUploaded: an object is complete at Key. A second upload of the
// same data type and filename replaces the object, keeps its DataID and
// says what it replaced.
type TaskDataUploaded struct {
	DataID      string `json:"data_id"`
	DataType    string `json:"data_type"`
	Filename    string `json:"filename"`
	Key         string `json:"key"`
	Size        int64  `json:"size_bytes"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	// WorkerID is the uploader (named worker_id like every event that names
	// a worker, so the events API's worker filter finds it).
	WorkerID string        `json:"worker_id"`
	Replaced *DataReplaced `json:"replaced,omitempty"`
}

// DataReplaced describes the object an upload replaced.
type DataReplaced struct {
	Size   int64  `json:"size_bytes"`
	SHA256 string `json:"sha256"`
}

// TaskDataDeleted: a prune removed the object (retention).
type TaskDataDeleted struct {
	DataID string `json:"data_id"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

func (TaskDataUploaded) EventType() string { return "task.data_uploaded" }
func (TaskDataDeleted) EventType() string  { return "task.data_deleted" }

func init() {
	register[TaskDataUploaded]()
	register[TaskDataDeleted]()
}

// Limits on data names.
const (
	MaxDataTypeLen = 64
	MaxFilenameLen = 200
)

var (
	dataTypeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	// A filename starts with a letter, digit or underscore (no hidden
	// files, no "." or ".."), then letters, digits, '.', '_', '-'.
	filenameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)
)

// ValidateDataType checks a data type: letters, digits, '_' and '-'.
func ValidateDataType(s string) error {
	switch {
	case s == "":
		return Invalid("data_type", "is required (letters, digits, '_' and '-', e.g. posts)")
	case len(s) > MaxDataTypeLen:
		return Invalid("data_type", "is longer than %d characters", MaxDataTypeLen)
	case !dataTypeRE.MatchString(s):
		return Invalid("data_type", "may hold only letters, digits, '_' and '-' and must start with a letter or digit")
	}
	return nil
}

// ValidateFilename checks a filename: letters, digits, '.', '_', '-', no
// path separators, not starting with a dot.
func ValidateFilename(s string) error {
	switch {
	case s == "":
		return Invalid("filename", "is required (letters, digits, '.', '_' and '-', e.g. nvda.jsonl)")
	case len(s) > MaxFilenameLen:
		return Invalid("filename", "is longer than %d characters", MaxFilenameLen)
	case !filenameRE.MatchString(s):
		return Invalid("filename", "may hold only letters, digits, '.', '_' and '-', must start with a letter, digit or '_', and cannot be a path")
	}
	return nil
}

// DataKey is an object's key in the seed's layout.
func DataKey(taskID, dataType, filename string) string {
	return fmt.Sprintf("worker-data/%s/%s/%s", taskID, dataType, filename)
}

// UploadData decides a finished upload by its holder. The payload's names
// must already be valid (the API checks them before reading the body).
func (t *Task) UploadData(p TaskDataUploaded) ([]Payload, error) {
	if err := t.CanUploadData(p.WorkerID); err != nil {
		return nil, err
	}
	if err := ValidateDataType(p.DataType); err != nil {
		return nil, err
	}
	if err := ValidateFilename(p.Filename); err != nil {
		return nil, err
	}
	return []Payload{p}, nil
}

// DeleteData decides a prune of one object of a finished task.
func (t *Task) DeleteData(p TaskDataDeleted) ([]Payload, error) {
	if !t.Status.Terminal() {
		return nil, &TransitionError{Command: "delete data of", Status: t.Status}
	}
	return []Payload{p}, nil
}

// TaskData is one indexed object of a task: the task_data row, folded from
// the task's data events.
type TaskData struct {
	ID          string    `json:"id"`
	TaskID      string    `json:"task_id"`
	DataType    string    `json:"data_type"`
	Filename    string    `json:"filename"`
	Key         string    `json:"key"`
	Size        int64     `json:"size_bytes"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type"`
	UploadedBy  string    `json:"uploaded_by"`
	UploadedAt  time.Time `json:"uploaded_at"`
	// Uploads counts the uploads of this name: above 1, it was replaced.
	Uploads int `json:"uploads"`
	Version int `json:"version"`
}

// ApplyUpload folds a task.data_uploaded event of the task into d (a zero
// TaskData for the first upload of the name).
func (d *TaskData) ApplyUpload(e Envelope, p TaskDataUploaded) {
	*d = TaskData{
		ID: p.DataID, TaskID: e.StreamID, DataType: p.DataType, Filename: p.Filename, Key: p.Key,
		Size: p.Size, SHA256: p.SHA256, ContentType: p.ContentType, UploadedBy: p.WorkerID,
		UploadedAt: e.OccurredAt, Uploads: d.Uploads + 1, Version: e.Version,
	}
}

// CanUploadData: only the holder uploads, only while in progress, and
// only while the task's history has room.
func (t *Task) CanUploadData(workerID string) error {
	if err := t.holder(workerID, "upload data to"); err != nil {
		return err
	}
	return t.Room("body")
}
