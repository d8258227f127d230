package store

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// A task's inputs name, for each dependency, the latest task of its retry
// chain with its result and its files (the first AttemptDataItems by data
// type and filename, and how many there are), all in one statement.
func TestTaskInputsCarryTheChainsLatestFiles(t *testing.T) {
	e := newBatchEnv(t)
	worker := e.user(t, "w", true, 1)
	first, retry, other := e.task(t, "crawl", events.PriorityMedium, ""), e.task(t, "crawl again", events.PriorityMedium, ""), e.task(t, "other", events.PriorityMedium, "")
	_, err := e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET status = 'failed', retry_task_id = $2 WHERE id = $1`, first, retry)
	require.NoError(t, err)
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET status = 'completed', result = '{"posts": 42}' WHERE id = ANY($1)`, []string{retry, other})
	require.NoError(t, err)
	file := func(task, name string) {
		t.Helper()
		_, err := e.db.pool.Exec(e.ctx, `INSERT INTO task_data (id, task_id, data_type, filename, key, size_bytes, sha256,
			content_type, uploaded_by, uploaded_at, uploads, version)
			VALUES (gen_random_uuid(), $1::uuid, 'posts', $2, $1::text || '/' || $2, 7, 'abc', 'application/json', $3, now(), 1, 1)`, task, name, worker)
		require.NoError(t, err)
	}
	file(first, "failed-attempt.json")
	for i := range AttemptDataItems + 5 {
		file(retry, fmt.Sprintf("page-%02d.json", i))
	}

	in, err := e.db.TaskInputs(e.ctx, &events.Task{DependsOn: []string{other, first}})
	require.NoError(t, err)
	require.Len(t, in, 2, "in depends_on's order")
	require.Equal(t, other, in[0].DependsOn)
	require.Equal(t, other, in[0].TaskID)
	require.Empty(t, in[0].Data)
	require.Zero(t, in[0].DataTotal)
	require.Equal(t, first, in[1].DependsOn)
	require.Equal(t, retry, in[1].TaskID, "the chain's latest task")
	require.JSONEq(t, `{"posts": 42}`, string(in[1].Result))
	require.Equal(t, AttemptDataItems+5, in[1].DataTotal)
	require.Len(t, in[1].Data, AttemptDataItems)
	require.Equal(t, "page-00.json", in[1].Data[0].Filename)
	require.Equal(t, fmt.Sprintf("page-%02d.json", AttemptDataItems-1), in[1].Data[AttemptDataItems-1].Filename)
	require.Equal(t, AttemptData{ID: in[1].Data[0].ID, DataType: "posts", Filename: "page-00.json", Size: 7, SHA256: "abc"}, in[1].Data[0])
	require.NotEmpty(t, in[1].Data[0].ID)

	// A claim gives the same inputs with the task, in the same statement.
	report := e.task(t, "report", events.PriorityMedium, "")
	_, err = e.db.pool.Exec(e.ctx, `UPDATE worker_tasks SET depends_on = $2 WHERE id = $1`, report, []string{other, first})
	require.NoError(t, err)
	claimed, err := e.db.Claim(e.ctx, worker, events.Meta{})
	require.NoError(t, err)
	require.Equal(t, report, claimed.ID)
	require.Equal(t, in, claimed.Inputs)
}

// A batch of completions that made blocked tasks pending tells
// AfterUnblock, once, after its commit; one that freed nothing does not.
func TestCompletionThatUnblocksTellsAfterUnblock(t *testing.T) {
	e := newBatchEnv(t)
	calls := 0
	e.db.afterUnblock = func() { calls++ }
	worker := e.user(t, "w", true, 1)
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: worker}}
	dependency := e.task(t, "crawl", events.PriorityMedium, "")
	dependent, err := e.db.CreateTask(e.ctx, e.db.pool, NewTaskParams{TaskTypeID: e.typeID, NewTaskParams: events.NewTaskParams{
		Title: "report", Priority: events.PriorityMedium, Params: json.RawMessage(`{}`), DependsOn: []string{dependency}}}, e.admin)
	require.NoError(t, err)
	require.Equal(t, events.StatusBlocked, dependent.Status)
	require.Equal(t, 1, calls, "the claimable dependency's create told it (TestCreateTellsClaimable), the blocked report's did not")
	calls = 0

	complete := func(want string) {
		t.Helper()
		got, err := e.db.ClaimMany(e.ctx, worker, 1, meta)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, want, got[0].ID)
		_, _, err = e.db.CompleteTask(e.ctx, want, worker, meta)
		require.NoError(t, err)
	}
	complete(dependency)
	require.Equal(t, 1, calls, "the dependency's completion unblocked the report")
	complete(dependent.ID)
	require.Equal(t, 1, calls, "the report's completion freed nothing")
}
