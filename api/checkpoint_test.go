package api_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// TestTaskCheckpoints: the holder saves checkpoints (the latest wins, each
// one an event); the task's next attempt gets the latest one of its chain
// in its claim answer, after a release (the same task) and after a retry
// (a new task), by a single or a batch claim; a task that never saved one
// and is no retry gets none. Replay rebuilds the same rows.
func TestTaskCheckpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "report")
	w1, w2 := b.newWorker(t, "Chloe", 1), b.newWorker(t, "Pierre", 2)

	task := b.newTask(t, tt, "long session", events.PriorityHigh, "")
	fresh := b.newTask(t, tt, "fresh", events.PriorityLow, "")
	got, err := w1.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, got.ID)
	require.Nil(t, got.Checkpoint, "nothing to resume from yet")

	_, err = w1.PutCheckpoint(ctx, task.ID, json.RawMessage(`{"session_id": "s-1", "step": 1}`))
	require.NoError(t, err)
	saved, err := w1.PutCheckpoint(ctx, task.ID, json.RawMessage("{\n  \"session_id\": \"s-1\",\n  \"step\": 2\n}"))
	require.NoError(t, err)
	require.Equal(t, task.ID, saved.TaskID)
	require.Equal(t, len(`{"session_id":"s-1","step":2}`), saved.SizeBytes, "measured compact")
	detail, err := b.admin.Task(ctx, task.ID)
	require.NoError(t, err)
	require.NotNil(t, detail.Checkpoint)
	require.JSONEq(t, `{"session_id":"s-1","step":2}`, string(detail.Checkpoint.State))
	require.Equal(t, 2, detail.Checkpoint.Saves)
	require.Equal(t, w1.ID, detail.Checkpoint.WorkerID)
	require.Equal(t, saved.CheckpointedAt, detail.Checkpoint.CheckpointedAt)
	require.Equal(t, &saved.CheckpointedAt, detail.CheckpointedAt)
	evs, err := b.admin.TaskEvents(ctx, task.ID)
	require.NoError(t, err)
	var summaries []string
	for _, e := range evs {
		if e.Type == "task.checkpointed" {
			summaries = append(summaries, e.Summary)
		}
	}
	require.Equal(t, []string{"checkpoint saved by Chloe (29 B)", "checkpoint saved by Chloe (29 B)"}, summaries)

	// Released: the same task, claimed again, resumes.
	_, err = w1.Release(ctx, task.ID, "going home")
	require.NoError(t, err)
	again, err := w2.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, again.ID)
	require.NotNil(t, again.Checkpoint)
	require.JSONEq(t, `{"session_id":"s-1","step":2}`, string(again.Checkpoint.State))
	require.Equal(t, task.ID, again.Checkpoint.TaskID)
	mine, err := w2.MyTask(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, again.Checkpoint, mine.Checkpoint, "reading the held task shows it too")

	// The other task never saved one: its claim reads none.
	other, err := w2.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, fresh.ID, other.ID)
	require.Nil(t, other.Checkpoint)

	// Pierre moves on, then fails; the retry resumes from his checkpoint.
	_, err = w2.PutCheckpoint(ctx, task.ID, json.RawMessage(`{"session_id":"s-2","step":3}`))
	require.NoError(t, err)
	_, err = w2.Fail(ctx, task.ID, "ran out of context")
	require.NoError(t, err)
	retry, err := b.admin.RetryTask(ctx, task.ID, "")
	require.NoError(t, err)
	_, err = w2.Complete(ctx, fresh.ID)
	require.NoError(t, err)
	claimed, err := w1.ClaimMany(ctx, 1, 0)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, retry.ID, claimed[0].ID)
	require.NotNil(t, claimed[0].Checkpoint, "a batch claim carries it too")
	require.Equal(t, task.ID, claimed[0].Checkpoint.TaskID, "saved by the earlier attempt")
	require.JSONEq(t, `{"session_id":"s-2","step":3}`, string(claimed[0].Checkpoint.State))
	require.Equal(t, 3, claimed[0].Checkpoint.Saves)
	retryDetail, err := b.admin.Task(ctx, retry.ID)
	require.NoError(t, err)
	require.Nil(t, retryDetail.CheckpointedAt, "the retry saved none itself")
	require.Equal(t, claimed[0].Checkpoint, retryDetail.Checkpoint)

	// The retry saves its own: from now on that one is the chain's latest.
	_, err = w1.PutCheckpoint(ctx, retry.ID, json.RawMessage(`"cursor-99"`))
	require.NoError(t, err)
	_, err = w1.Release(ctx, retry.ID, "")
	require.NoError(t, err)
	last, err := w1.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, retry.ID, last.ID)
	require.Equal(t, retry.ID, last.Checkpoint.TaskID)
	require.JSONEq(t, `"cursor-99"`, string(last.Checkpoint.State))

	b.requireProjectionIsFold(t, task.ID)
	b.requireProjectionIsFold(t, retry.ID)
	b.requireReplayClean(t)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE type = 'task.checkpointed'`).Scan(&n))
	require.Equal(t, 4, n)
}
