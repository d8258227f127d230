package events

import (
	"bytes"
	"encoding/json"
	"time"
)

// Task checkpoints: a small JSON document the worker holding a task saves
// while it works (an agent's session id, a cursor), so that the task's next
// attempt (its retry, or the same task claimed again after a release) can
// resume instead of starting over. Each save is an event carrying the whole
// state; the latest one wins (ADR 026).

// MaxCheckpointBytes bounds a checkpoint's state, in its compact form.
const MaxCheckpointBytes = 64 << 10

// TaskCheckpointed: the holder saved State (compact JSON, SizeBytes long).
type TaskCheckpointed struct {
	WorkerID  string          `json:"worker_id"`
	State     json.RawMessage `json:"state"`
	SizeBytes int             `json:"size_bytes"`
}

func (TaskCheckpointed) EventType() string { return "task.checkpointed" }

func init() { register[TaskCheckpointed]() }

// Checkpoint decides a save of state by workerID: only the holder of a task
// in progress saves one, and the state is one JSON value (not null) of at
// most MaxCheckpointBytes once compacted.
func (t *Task) Checkpoint(workerID string, state json.RawMessage) ([]Payload, error) {
	if err := t.holder(workerID, "save a checkpoint of"); err != nil {
		return nil, err
	}
	if err := t.Room("state"); err != nil {
		return nil, err
	}
	compact, err := CompactState(state)
	if err != nil {
		return nil, err
	}
	return []Payload{TaskCheckpointed{WorkerID: workerID, State: compact, SizeBytes: len(compact)}}, nil
}

// CompactState checks a checkpoint's state and returns it without
// insignificant white space: the form that is stored, bounded and measured.
func CompactState(state json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(state)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, Invalid("state", "is required: a JSON value such as {\"session_id\": \"...\"}")
	}
	var out bytes.Buffer
	if err := json.Compact(&out, trimmed); err != nil {
		return nil, Invalid("state", "is not valid JSON: %s", err.Error())
	}
	if out.Len() > MaxCheckpointBytes {
		return nil, TooLarge("state", "is %d bytes of compact JSON; a checkpoint holds at most %d (64 KiB)", out.Len(), MaxCheckpointBytes)
	}
	return out.Bytes(), nil
}

// MayResume reports whether the task's chain may hold a checkpoint: it
// saved one itself, or it is a retry (an earlier attempt may have). Only
// then is the checkpoint worth a read.
func (t *Task) MayResume() bool { return t.CheckpointedAt != nil || t.ParentTaskID != nil }

// TaskCheckpoint is a task's latest checkpoint: the task_checkpoints row,
// folded from the task's task.checkpointed events.
type TaskCheckpoint struct {
	TaskID         string          `json:"task_id"`
	State          json.RawMessage `json:"state" openapi:"any"`
	SizeBytes      int64           `json:"size_bytes"`
	WorkerID       string          `json:"worker_id"`
	CheckpointedAt time.Time       `json:"checkpointed_at"`
	// Saves counts the task's checkpoints: the latest replaced the others.
	Saves   int `json:"saves"`
	Version int `json:"version"`
}

// ApplyCheckpoint folds a task.checkpointed event of the task into c (a
// zero TaskCheckpoint for the task's first).
func (c *TaskCheckpoint) ApplyCheckpoint(e Envelope, p TaskCheckpointed) {
	*c = TaskCheckpoint{TaskID: e.StreamID, State: p.State, SizeBytes: int64(p.SizeBytes), WorkerID: p.WorkerID,
		CheckpointedAt: e.OccurredAt, Saves: c.Saves + 1, Version: e.Version}
}
