package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// Dependencies (DESIGN §13, ADR 025). The edges are stored as given
// (task_dependencies, folded from the dependent's task.created); a
// dependency counts done when the latest task of its retry chain
// completed, so the writers walk the chain (parent_task_id backwards,
// retry_task_id forwards) instead of moving edges onto retries. A blocked
// task's deps_left counts its dependencies not done; each completion
// decrements it on the row, so concurrent completions never both miss
// the last one.

// dependencyMeta is the meta of the events the dependency statements
// append for other tasks: a decision of the system, not of the actor whose
// command caused it.
var dependencyMeta = func() string {
	b, _ := json.Marshal(events.Meta{Actor: events.System("dependencies")})
	return string(b)
}()

// unblockDependents runs after a statement that completed the tasks $1, as
// a statement of its own so its snapshot sees every dependent whose
// creation committed while the completion waited for the dependency's row
// lock. Each dependent of the completed
// tasks' chains loses one open dependency per edge; those left with none
// become pending (task.unblocked naming the completion). The counters move
// as the projector would move them. While no task is blocked anywhere, the
// statement is one probe of worker_tasks_status: a completion that frees
// nothing pays nothing else.
const unblockDependents = `WITH RECURSIVE chain(done_id, id) AS (
    SELECT w.id, w.id FROM worker_tasks w
     WHERE w.id = ANY($1::uuid[]) AND w.status = 'completed'
       AND EXISTS (SELECT 1 FROM worker_tasks b WHERE b.status = 'blocked')
    UNION ALL
    SELECT c.done_id, w.parent_task_id FROM chain c JOIN worker_tasks w ON w.id = c.id
     WHERE w.parent_task_id IS NOT NULL
), dec AS (
    SELECT e.task_id, count(*)::int AS n, min(c.done_id::text) AS freed_by
      FROM chain c JOIN task_dependencies e ON e.depends_on = c.id
     GROUP BY e.task_id
), u AS (
    UPDATE worker_tasks w
       SET deps_left = greatest(w.deps_left - dec.n, 0),
           status = CASE WHEN w.deps_left <= dec.n THEN 'pending' ELSE w.status END,
           scheduled = w.deps_left <= dec.n AND w.available_at > $2,
           version = w.version + (w.deps_left <= dec.n)::int,
           updated_at = CASE WHEN w.deps_left <= dec.n THEN $2 ELSE w.updated_at END
      FROM dec
     WHERE w.id = dec.task_id AND w.status = 'blocked'
    RETURNING w.id, w.version, w.status, w.assigned_to, w.scheduled, dec.freed_by, w.task_type_id, w.priority
), freed AS (
    SELECT * FROM u WHERE status = 'pending'
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', f.id, f.version, 'task.unblocked', jsonb_build_object('dependency_id', f.freed_by), $3::jsonb, $2
      FROM freed f
), cnt AS (
    INSERT INTO task_counts AS c (pid, blocked, pending, queued, scheduled)
    SELECT pg_backend_pid(), -count(*), count(*),
           count(*) FILTER (WHERE assigned_to IS NULL AND NOT scheduled), count(*) FILTER (WHERE scheduled)
      FROM freed HAVING count(*) > 0
    ON CONFLICT (pid) DO UPDATE SET blocked = c.blocked + excluded.blocked, pending = c.pending + excluded.pending,
        queued = c.queued + excluded.queued, scheduled = c.scheduled + excluded.scheduled
), pnd AS (
    INSERT INTO pending_counts AS pc (pid, task_type_id, priority, state, assigned, tasks)
    SELECT pg_backend_pid(), f.task_type_id, f.priority, s.state, f.assigned_to IS NOT NULL, sum(s.n)
      FROM freed f CROSS JOIN LATERAL (VALUES ('blocked', -1), (CASE WHEN f.scheduled THEN 'scheduled' ELSE 'ready' END, 1)) s(state, n)
     GROUP BY 2, 3, 4, 5 ORDER BY 2, 3, 4, 5
    ` + projections.PendingUpsert + `
)
SELECT count(*) FROM freed`

// unblockBatchDependents is unblockDependents after the batched
// completion, whose $1 are candidates: only the tasks this transaction
// completed count (their row's xmin is this implicit transaction, which
// has no subtransactions), so a completion another batch made earlier is
// never counted twice.
var unblockBatchDependents = strings.Replace(unblockDependents, "w.status = 'completed'",
	"w.status = 'completed' AND w.xmin = pg_current_xact_id()::xid", 1)

// cancelDependents runs after a statement that ended the chains of $1
// (cancelled, or failed with no retry coming): every blocked task that
// waits for one of them and did not ask to wait is cancelled with reason
// dependency_failed naming its dependency, and so on down the graph.
const cancelDependents = `WITH RECURSIVE chain(ended, id) AS (
    SELECT w.id, w.id FROM worker_tasks w WHERE w.id = ANY($1::uuid[])
    UNION ALL
    SELECT c.ended, w.parent_task_id FROM chain c JOIN worker_tasks w ON w.id = c.id
     WHERE w.parent_task_id IS NOT NULL
), doomed(id, because) AS (
    SELECT e.task_id, c.ended FROM chain c
      JOIN task_dependencies e ON e.depends_on = c.id
      JOIN worker_tasks w ON w.id = e.task_id
     WHERE w.status = 'blocked' AND w.on_dependency_failure IS NULL
    UNION
    SELECT e.task_id, d.id FROM doomed d
      JOIN task_dependencies e ON e.depends_on = d.id
      JOIN worker_tasks w ON w.id = e.task_id
     WHERE w.status = 'blocked' AND w.on_dependency_failure IS NULL
), pick AS (
    SELECT DISTINCT ON (id) id, because FROM doomed ORDER BY id, because
), u AS (
    UPDATE worker_tasks w
       SET status = 'cancelled', completed_at = $2, updated_at = $2, version = w.version + 1, deps_left = 0
      FROM pick
     WHERE w.id = pick.id AND w.status = 'blocked'
    RETURNING w.id, w.version, pick.because, w.task_type_id, w.priority, w.assigned_to
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', u.id, u.version, 'task.cancelled',
           jsonb_build_object('by', 'dependencies', 'reason', '` + events.ReasonDependencyFailed + `', 'dependency_id', u.because),
           $3::jsonb, $2
      FROM u
), cnt AS (
    INSERT INTO task_counts AS c (pid, blocked, cancelled)
    SELECT pg_backend_pid(), -count(*), count(*) FROM u HAVING count(*) > 0
    ON CONFLICT (pid) DO UPDATE SET blocked = c.blocked + excluded.blocked, cancelled = c.cancelled + excluded.cancelled
), pnd AS (
    INSERT INTO pending_counts AS pc (pid, task_type_id, priority, state, assigned, tasks)
    SELECT pg_backend_pid(), u.task_type_id, u.priority, 'blocked', u.assigned_to IS NOT NULL, -count(*)
      FROM u GROUP BY 2, 3, 5 ORDER BY 2, 3, 5
    ` + projections.PendingUpsert + `
)
SELECT count(*) FROM u`

// queueDependencyEffects queues what a task's change from before to after
// does to the tasks waiting for it: its completion unblocks them, the end
// of its chain cancels them. Nothing for any other change.
func queueDependencyEffects(b *pgx.Batch, before, after *events.Task, now time.Time) {
	switch {
	case after.Status == events.StatusCompleted && (before == nil || before.Status != events.StatusCompleted):
		b.Queue(unblockDependents, []string{after.ID}, now, dependencyMeta)
	case chainEnded(after) && (before == nil || !chainEnded(before)):
		b.Queue(cancelDependents, []string{after.ID}, now, dependencyMeta)
	}
}

// chainEnded reports whether t ended its retry chain without completing:
// cancelled, or failed with no retry coming.
func chainEnded(t *events.Task) bool {
	if t.Status == events.StatusCancelled {
		return true
	}
	return t.Status == events.StatusFailed && t.RetryOutcome != nil && *t.RetryOutcome != events.RetryOutcomeRetried
}

// dependencyState is what a dependency is, through its retry chain.
type dependencyState struct {
	latest string        // the latest task of its chain
	status events.Status // the latest's status
	done   bool          // the latest completed
	ended  bool          // the chain ended without completing
}

// resolveDependencies locks, FOR SHARE, the latest task of each id's retry
// chain and reports its state; ids that name no task are absent. The lock
// makes a completion, a retry or an end of those tasks wait for this
// transaction, and their statements that follow (unblockDependents,
// cancelDependents, a retry) then see the edges it writes. q must be a
// transaction.
func resolveDependencies(ctx context.Context, q Querier, ids []string) (map[string]dependencyState, error) {
	out := make(map[string]dependencyState, len(ids))
	origin := make(map[string][]string, len(ids)) // task -> the ids whose chain reached it
	for _, id := range ids {
		origin[id] = append(origin[id], id)
	}
	next := ids
	for len(next) > 0 {
		rows, err := q.Query(ctx, `SELECT id::text, status, retry_outcome, retry_task_id::text FROM worker_tasks
			WHERE id = ANY($1::uuid[]) ORDER BY id FOR SHARE`, next)
		if err != nil {
			return nil, fmt.Errorf("read dependencies: %w", err)
		}
		var id string
		var status events.Status
		var outcome, retry *string
		later := map[string][]string{}
		_, err = pgx.ForEachRow(rows, []any{&id, &status, &outcome, &retry}, func() error {
			if retry != nil {
				later[*retry] = append(later[*retry], origin[id]...)
				return nil
			}
			st := dependencyState{latest: id, status: status, done: status == events.StatusCompleted}
			st.ended = status == events.StatusCancelled || (status == events.StatusFailed && outcome != nil)
			for _, o := range origin[id] {
				out[o] = st
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read dependencies: %w", err)
		}
		next = next[:0:0]
		origin = later
		for r := range later {
			next = append(next, r)
		}
	}
	return out, nil
}

// ReleaseBlocked is an admin's release of a blocked task: it becomes
// pending whatever its dependencies say.
func (db *DB) ReleaseBlocked(ctx context.Context, q Querier, id, reason string, meta events.Meta) (*events.Task, error) {
	t, _, err := db.UpdateTask(ctx, q, id, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Unblock(meta.Actor.ID, reason)
	})
	return t, err
}

// decideDependencies checks the dependencies of each request whose outs
// entry has no error yet, under their locks (resolveDependencies), and
// marks it Blocked when some are not done. A dependency may be a task
// created earlier in reqs (by its ID), which is never done. A missing
// task, or one whose chain ended without completing for a task that did
// not ask to wait, is the request's error. It returns each blocked
// request's count of open dependencies, by request index.
func (db *DB) decideDependencies(ctx context.Context, q Querier, reqs []createRequest, outs []outcome[*events.Task]) (map[int]int, error) {
	inBatch := map[string]bool{}
	var external []string
	for i, r := range reqs {
		if outs[i].err != nil {
			continue
		}
		if r.params.ID != "" {
			inBatch[canonicalUUID(r.params.ID)] = true
		}
		if err := events.ValidateDependencies(r.params.DependsOn, r.params.OnDependencyFailure); err != nil {
			outs[i].err = err
			continue
		}
		for _, d := range r.params.DependsOn {
			external = append(external, canonicalUUID(d))
		}
	}
	if len(external) == 0 {
		return nil, nil
	}
	if _, inTx := q.(pgx.Tx); !inTx {
		return nil, fmt.Errorf("create task: dependencies need a transaction")
	}
	external = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(external))), func(id string) bool { return inBatch[id] })
	states, err := resolveDependencies(ctx, q, external)
	if err != nil {
		return nil, err
	}
	left := map[int]int{}
	for i := range reqs {
		p := &reqs[i].params
		if outs[i].err != nil || len(p.DependsOn) == 0 {
			continue
		}
		open := 0
		for j, d := range p.DependsOn {
			id := canonicalUUID(d)
			if inBatch[id] {
				open++
				continue
			}
			st, ok := states[id]
			switch {
			case !ok:
				outs[i].err = events.Invalid(fmt.Sprintf("depends_on[%d]", j), "no task %s", d)
			case st.ended && p.OnDependencyFailure != events.OnDependencyFailureWait:
				outs[i].err = events.Invalid(fmt.Sprintf("depends_on[%d]", j),
					"task %s ended %s without completing; set on_dependency_failure to wait to create the task blocked", st.latest, st.status)
			case !st.done:
				open++
			}
			if outs[i].err != nil {
				break
			}
		}
		p.Blocked = outs[i].err == nil && open > 0
		if p.Blocked {
			left[i] = open
		}
	}
	return left, nil
}

// setDepsLeft sets the open dependencies of new blocked tasks.
const setDepsLeft = `UPDATE worker_tasks w SET deps_left = x.n
  FROM unnest($1::uuid[], $2::int[]) AS x(id, n) WHERE w.id = x.id`

// queueDepsLeft queues setDepsLeft for the blocked tasks created: left
// has their open dependencies by request index.
func queueDepsLeft(b *pgx.Batch, outs []outcome[*events.Task], left map[int]int) {
	var ids []string
	var ns []int32
	for i, n := range left {
		if outs[i].res != nil {
			ids, ns = append(ids, outs[i].res.ID), append(ns, int32(n))
		}
	}
	if len(ids) > 0 {
		b.Queue(setDepsLeft, ids, ns)
	}
}

// Input is what a dependency gave the task that waited for it: the latest
// task of its retry chain (the one that completed), its result and files.
type Input struct {
	// Ref is the dependency's ref, when both are in a workflow.
	Ref *string `json:"ref"`
	// DependsOn is the dependency as the task named it; TaskID the task of
	// its chain that completed (the same unless it was retried).
	DependsOn string        `json:"depends_on"`
	TaskID    string        `json:"task_id"`
	Status    events.Status `json:"status"`
	// Result is the posted result; when longer than InputResultBytes it is
	// a JSON string holding its beginning and ResultTruncated is set.
	Result          json.RawMessage `json:"result" openapi:"any"`
	ResultBytes     int             `json:"result_bytes,omitempty"`
	ResultTruncated bool            `json:"result_truncated,omitempty"`
	// Data lists its files as previous_attempts do (at most
	// AttemptDataItems); download through GET /worker/tasks/{your
	// task}/data/{id}.
	Data      []AttemptData `json:"data,omitempty"`
	DataTotal int           `json:"data_total,omitempty"`
}

// InputResultBytes cuts each input's result in a claim's answer.
const InputResultBytes = 16 << 10

// inputsOf is a jsonb array, for each dependency in deps (a uuid[] SQL
// expression), of the latest task of its retry chain, with its result cut
// in SQL and its files: the first AttemptDataItems by data type and
// filename, as previous_attempts lists them, and how many. An expression,
// not a statement, so that the claim statement gives each claimed task its
// inputs in the same round trip (ADR 025), and TaskInputs reads them alike.
func inputsOf(deps string) string {
	return fmt.Sprintf(`(WITH RECURSIVE c(dep, id, depth) AS (
    SELECT d, d, 0 FROM unnest(%[1]s) AS d
    UNION ALL
    SELECT c.dep, w.retry_task_id, c.depth + 1 FROM c JOIN worker_tasks w ON w.id = c.id
     WHERE w.retry_task_id IS NOT NULL AND c.depth < %[3]d
), latest AS (
    SELECT DISTINCT ON (c.dep) c.dep, w.id, w.ref, w.status, left(w.result::text, %[2]d + 1) AS result,
           octet_length(w.result::text) AS result_bytes
      FROM c JOIN worker_tasks w ON w.id = c.id
     ORDER BY c.dep, c.depth DESC
)
SELECT jsonb_agg(jsonb_build_object('dep', l.dep, 'id', l.id, 'ref', l.ref, 'status', l.status,
           'result', l.result, 'result_bytes', l.result_bytes,
           'data', (SELECT jsonb_agg(jsonb_build_object('id', f.id, 'data_type', f.data_type, 'filename', f.filename,
                                                        'size_bytes', f.size_bytes, 'sha256', f.sha256) ORDER BY f.data_type, f.filename)
                      FROM (SELECT id, data_type, filename, size_bytes, sha256 FROM task_data WHERE task_id = l.id
                             ORDER BY data_type, filename LIMIT %[4]d) f),
           'data_total', (SELECT count(*) FROM task_data WHERE task_id = l.id)))
  FROM latest l)`, deps, InputResultBytes, maxChainDepth, AttemptDataItems)
}

// dependencyInputs reads inputsOf for the dependencies $1.
var dependencyInputs = `SELECT ` + inputsOf("$1::uuid[]")

// rawInput is one element of inputsOf's array.
type rawInput struct {
	Dep         string        `json:"dep"`
	ID          string        `json:"id"`
	Ref         *string       `json:"ref"`
	Status      events.Status `json:"status"`
	Result      *string       `json:"result"`
	ResultBytes *int          `json:"result_bytes"`
	Data        []AttemptData `json:"data"`
	DataTotal   int           `json:"data_total"`
}

// decodeInputs turns inputsOf's array (nil: SQL NULL) into t's inputs, in
// the order of its depends_on. Refs are given only inside a workflow.
func decodeInputs(t *events.Task, raw []byte) ([]Input, error) {
	var rs []rawInput
	if raw != nil {
		if err := json.Unmarshal(raw, &rs); err != nil {
			return nil, fmt.Errorf("inputs of %s: %w", t.ID, err)
		}
	}
	byDep := make(map[string]Input, len(rs))
	for _, r := range rs {
		in := Input{Ref: r.Ref, DependsOn: r.Dep, TaskID: r.ID, Status: r.Status, Data: r.Data, DataTotal: r.DataTotal}
		if r.Result != nil {
			in.Result, in.ResultTruncated = cutJSON(*r.Result, InputResultBytes)
			if in.ResultTruncated && r.ResultBytes != nil {
				in.ResultBytes = *r.ResultBytes
			}
		}
		if t.WorkflowID == nil {
			in.Ref = nil
		}
		byDep[in.DependsOn] = in
	}
	out := make([]Input, 0, len(t.DependsOn))
	for _, d := range t.DependsOn {
		if in, ok := byDep[d]; ok {
			out = append(out, in)
		}
	}
	return out, nil
}

// TaskInputs returns the inputs of a task with dependencies, in the order
// of its depends_on; nil for a task without. A claim gives them with the
// task; this reads them for a task read later.
func (db *DB) TaskInputs(ctx context.Context, t *events.Task) ([]Input, error) {
	if len(t.DependsOn) == 0 {
		return nil, nil
	}
	var raw []byte
	if err := db.pool.QueryRow(ctx, dependencyInputs, t.DependsOn).Scan(&raw); err != nil {
		return nil, mapErr(fmt.Errorf("task inputs: %w", err))
	}
	return decodeInputs(t, raw)
}
