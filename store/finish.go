package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Finish is one task a worker reports finished.
type Finish struct {
	ID     string
	Status events.Status // events.StatusCompleted or events.StatusFailed
	// Result, when set, is posted first (task.result_posted), as
	// POST .../result before the status would.
	Result json.RawMessage
	Reason string // failed only
	Kind   string // failed only: events.FailureError (when empty) or events.FailureTimeout
	// Usage, when set (validated), is the attempt's LLM usage, reported
	// first (task.usage_reported), as POST .../usage would.
	Usage *events.UsageReport
}

// FinishOutcome is one item's answer: the task after it, with the events
// appended, or the error the single command would have returned.
type FinishOutcome struct {
	Task   *events.Task
	Events []events.Envelope
	Err    error
}

// ItemError is a request-level refusal that names the item at fault: the
// whole request is refused and nothing changed.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }
func (e *ItemError) Unwrap() error { return e.Err }

// FinishTasks finishes a worker's tasks, each item decided on its own and
// answered in order: the events and rows are exactly those of the single
// commands (CompleteTask, or PostResult then Complete/Fail as one command).
// Plain completions (no result) share the batched completion (ADR 008), so
// a hundred of them cost one statement; the others run one by one.
//
// An item naming a task that another worker holds (or nobody does) refuses
// the whole request with an *ItemError before anything changes: that is a
// client's mistake, not a race. Ids must be distinct canonical UUIDs (the
// API checks).
func (db *DB) FinishTasks(ctx context.Context, workerID string, items []Finish, meta events.Meta) ([]FinishOutcome, error) {
	wid, err := uuid.Parse(workerID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a worker id", events.ErrForbidden, workerID)
	}
	workerID = wid.String()
	if err := db.checkHolder(ctx, workerID, items); err != nil {
		return nil, err
	}
	outs := make([]FinishOutcome, len(items))
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(events.TaskCompleted{WorkerID: workerID})
	if err != nil {
		return nil, err
	}
	var fast []completeRequest
	var fastAt []int
	for i, it := range items {
		if it.Status == events.StatusCompleted && len(it.Result) == 0 && it.Usage == nil {
			fast = append(fast, completeRequest{id: it.ID, worker: workerID, data: string(data), meta: string(metaJSON)})
			fastAt = append(fastAt, i)
		}
	}
	done := make([]bool, len(items))
	if len(fast) > 0 {
		for j, o := range db.completions.doMany(ctx, fast) {
			i := fastAt[j]
			if o.err != nil {
				outs[i].Err, done[i] = o.err, true
				continue
			}
			if o.res != nil {
				outs[i] = completedOutcome(o.res, data, meta)
				done[i] = true
			}
		}
	}
	for i, it := range items {
		if done[i] {
			continue
		}
		if err := ctx.Err(); err != nil {
			outs[i].Err = err
			continue
		}
		outs[i].Task, outs[i].Events, outs[i].Err = db.UpdateTask(ctx, db.pool, it.ID, meta, db.finishDecision(ctx, workerID, it))
	}
	return outs, nil
}

// finishDecision is the single commands' rule for one item: the usage and
// the result first when there are, then the completion or the failure,
// decided on the same state (neither changes status nor holder).
func (db *DB) finishDecision(ctx context.Context, workerID string, it Finish) TaskDecision {
	return func(t *events.Task) ([]events.Payload, error) {
		var ps []events.Payload
		if it.Usage != nil {
			a, err := db.attribution(ctx, db.ambient(ctx, db.pool), t)
			if err != nil {
				return nil, err
			}
			if ps, err = t.ReportUsage(workerID, *it.Usage, a); err != nil {
				return nil, err
			}
		}
		if len(it.Result) > 0 {
			p, err := t.PostResult(workerID, it.Result)
			if err != nil {
				return nil, err
			}
			ps = append(ps, p...)
		}
		var end []events.Payload
		var err error
		if it.Status == events.StatusCompleted {
			end, err = t.Complete(workerID)
		} else {
			kind := it.Kind
			if kind == "" {
				kind = events.FailureError
			}
			end, err = t.Fail(workerID, kind, it.Reason, nil)
		}
		if err != nil {
			return nil, err
		}
		return append(ps, end...), nil
	}
}

// completedOutcome is the answer of a completion the batch made.
func completedOutcome(t *events.Task, data []byte, meta events.Meta) FinishOutcome {
	e := events.New(events.StreamTask, t.ID, events.TaskCompleted{WorkerID: *t.AssignedTo}, meta, *t.CompletedAt)
	e.Version, e.Data = t.Version, data
	return FinishOutcome{Task: t, Events: []events.Envelope{e}}
}

// checkHolder refuses the request when an item names an existing task that
// was never this worker's to finish: held by another worker, or by nobody.
// Tasks that do not exist are left to each item's own 404. Concurrent
// checks share one statement (checkHolders).
func (db *DB) checkHolder(ctx context.Context, workerID string, items []Finish) error {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	foreign, err := db.holderChecks.do(ctx, holderCheck{worker: workerID, ids: ids})
	if err != nil {
		return mapErr(fmt.Errorf("finish: check holder: %w", err))
	}
	for i, it := range items {
		if foreign[it.ID] {
			return &ItemError{Index: i, Err: fmt.Errorf("%w: task %s is not held by this worker", events.ErrForbidden, it.ID)}
		}
	}
	return nil
}

// holderCheck is one request's check: its worker and the tasks it names.
type holderCheck struct {
	worker string
	ids    []string
}

// checkHolders runs a batch of checks in one statement, through the
// batcher (ADR 016): a statement of its own for every request of the
// batched lane made every concurrent request hold a connection of its own,
// and each new connection planned the hot path's statements afresh. Each
// check gets the ids among its own that its worker does not hold.
func (db *DB) checkHolders(ctx context.Context, reqs []holderCheck) ([]outcome[map[string]bool], error) {
	var ids, workers []string
	var of []int32
	for i, r := range reqs {
		for _, id := range r.ids {
			ids, workers, of = append(ids, id), append(workers, r.worker), append(of, int32(i))
		}
	}
	b := &pgx.Batch{}
	b.Queue(indexLookupsOnly)
	b.Queue(foreignTasks, ids, workers, of)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	outs := make([]outcome[map[string]bool], len(reqs))
	for i := range outs {
		outs[i].res = map[string]bool{}
	}
	for rows.Next() {
		var i int32
		var id string
		if err := rows.Scan(&i, &id); err != nil {
			rows.Close()
			return nil, err
		}
		outs[i].res[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return outs, br.Close()
}

// foreignTasks are the tasks $1 whose holder is not the worker $2 of the
// same place, each with the check $3 it came from.
const foreignTasks = `SELECT c.req, c.id::text FROM unnest($1::uuid[], $2::uuid[], $3::int[]) AS c(id, worker, req)
  JOIN worker_tasks w ON w.id = c.id
 WHERE w.assigned_to IS DISTINCT FROM c.worker`

// FinishTask finishes one of the worker's tasks as the general command:
// it.Usage and it.Result first, then the completion or the failure, in
// one batch.
func (db *DB) FinishTask(ctx context.Context, workerID string, it Finish, meta events.Meta) (*events.Task, []events.Envelope, error) {
	return db.UpdateTask(ctx, db.pool, it.ID, meta, db.finishDecision(ctx, workerID, it))
}
