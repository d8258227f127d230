package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// TaskWithType is a task with its type embedded: what a worker needs to run it.
type TaskWithType struct {
	events.Task
	TaskType *events.TaskType `json:"task_type"`
	// PreviousAttempts is, for a retry, what happened before (see
	// DB.PreviousAttempts); the API fills it, the claim never reads it.
	PreviousAttempts []Attempt `json:"previous_attempts,omitempty"`
	// Checkpoint is, for a task that may resume (events.Task.MayResume),
	// the latest checkpoint of its retry chain; the API fills it too.
	Checkpoint *events.TaskCheckpoint `json:"checkpoint,omitempty"`
	// Inputs is, for a task with dependencies, what each gave it: a claim
	// reads them with the task; DB.TaskInputs reads them later.
	Inputs []Input `json:"inputs,omitempty"`
}

// lockWorkers serializes each worker's claims so its capacity holds under
// concurrent claims (from other service instances: one instance's batcher
// already never runs two claims of a worker at once). It is the batch's
// first statement, so the claim that follows takes its snapshot after any
// earlier claim by the same workers committed. Locks are taken in id order,
// so two batches never wait on each other in a cycle. A worker missing here
// does not exist or is no worker.
//
// A batch takes the locks with SKIP LOCKED: a worker whose row another
// transaction holds (another instance's claim, an admin's edit) must not
// hold back the other workers' claims. Such a worker comes back as not
// locked and is left out of the claim (the claim reads the locked set from
// claimWorkersSetting), and Claim runs it again alone, waiting for its lock
// (lockWorkersWaiting). The set travels in a transaction-local setting
// because both statements go in one round trip.
//
// The same statement locks the rows of the limited types that have work
// (lockGates): the claim's limited branch takes their tasks only for the
// types whose rows this batch holds (claimGatesSetting). Those it does not
// get (another batch is claiming them, or an admin is changing the type)
// are left to that batch, never waited for. With no limited type the
// lookup is one probe of an empty index.
//
// Whether any unpaused limited type exists is asked by every lock statement
// (limitsLive): a batch runs the claim with the limited branch only while
// one does (see runClaims), so types without controls pay nothing for it.
//
// Without the limited branch, a batch locks only the workers a claim could
// serve: a row lock gives the transaction an xid, and its commit a WAL
// flush, which the empty claim a worker makes as it starts each long-poll
// need not pay, nor make the next claim wait behind (claimable). A worker
// left out for that counts as locked, so it is not claimed for again
// alone, and the claim, which serves only locked workers, gives it nothing.
func lockStatement(waiting, limited bool) string {
	lock, rows := `FOR NO KEY UPDATE SKIP LOCKED`, `u.id, l.id IS NOT NULL`
	from := `FROM users u LEFT JOIN locked l ON l.id = u.id WHERE u.id = ANY($1::uuid[]) AND u.is_worker`
	serves := ""
	if !limited {
		serves = ` AND ` + claimable("users.id")
		rows = `u.id, l.id IS NOT NULL OR NOT ` + claimable("u.id")
	}
	if waiting {
		lock, rows, from = `FOR NO KEY UPDATE`, `id, true`, `FROM locked`
	}
	gates, gateSet := "", `''`
	if limited {
		gates = ", " + lockGates
		gateSet = `set_config('` + claimGatesSetting + `', (SELECT COALESCE(array_agg(id), '{}')::text FROM gates), true)`
	}
	return `WITH locked AS MATERIALIZED (
    SELECT id FROM users WHERE id = ANY($1::uuid[]) AND is_worker` + serves + ` ORDER BY id ` + lock + `
)` + gates + `
SELECT ` + rows + `,
       set_config('` + claimWorkersSetting + `', (SELECT COALESCE(array_agg(id), '{}')::text FROM locked), true),
       ` + gateSet + `, ` + limitsLive + `
  ` + from
}

// claimable is whether a claim without the limited branch could find a
// task for worker: one probe each of worker_tasks_queue and
// worker_tasks_preassigned, whose predicates these are.
func claimable(worker string) string {
	return `(EXISTS (SELECT 1 FROM worker_tasks q WHERE q.status = 'pending' AND q.assigned_to IS NULL AND NOT q.scheduled AND NOT q.gated)
      OR EXISTS (SELECT 1 FROM worker_tasks a WHERE a.assigned_to = ` + worker + ` AND a.status = 'pending' AND NOT a.scheduled AND NOT a.gated))`
}

const (
	// limitsLive is whether a claim may need the limited branch now.
	limitsLive = `EXISTS (SELECT 1 FROM task_types WHERE gated AND NOT paused)`
	// lockGates locks the rows of the unpaused limited types with tasks a
	// claim of this batch could take: unassigned, or assigned to one of its
	// workers ($1), when one of the workers it locked has a free slot. A
	// batch that could take nothing must not hold a type's row: the batches
	// it makes skip the type would miss the room a completion just freed,
	// and nothing would wake them again. The check is correlated with the
	// type, so it runs only when a limited type has work. "Has work" is a
	// scalar subquery per type: written as EXISTS, the planner hashed it,
	// reading every gated task in the index to build the hash.
	lockGates = `gates AS MATERIALIZED (
    SELECT tt.id FROM task_types tt
     WHERE tt.gated AND NOT tt.paused
       AND coalesce((SELECT true FROM worker_tasks w WHERE w.task_type_id = tt.id AND ` + gatedPool + ` LIMIT 1),
                    (SELECT true FROM worker_tasks w WHERE w.assigned_to = ANY($1::uuid[]) AND w.task_type_id = tt.id AND ` + gatedMine + ` LIMIT 1),
                    false)
       AND EXISTS (SELECT 1 FROM locked l JOIN users u ON u.id = l.id
                    WHERE tt.id IS NOT NULL AND u.active
                      AND u.max_concurrent_tasks > (SELECT count(*) FROM worker_tasks h WHERE h.assigned_to = l.id AND h.status = 'in_progress'))
     ORDER BY tt.id FOR NO KEY UPDATE SKIP LOCKED
)`
	// claimWorkersSetting holds, for the rest of a claim's transaction, the
	// workers whose rows it locked. Unset (or reset to '' after an earlier
	// transaction) means none. claimGatesSetting holds the limited types.
	claimWorkersSetting = "task_service.claim_workers"
	claimGatesSetting   = "task_service.claim_gates"

	// gatedPool and gatedMine are exactly the predicates of
	// worker_tasks_gated and worker_tasks_gated_assigned (migration 022),
	// written as literals so that every plan proves them.
	gatedPool = `w.status = 'pending' AND w.gated AND NOT w.scheduled AND w.assigned_to IS NULL`
	gatedMine = `w.status = 'pending' AND w.gated AND NOT w.scheduled AND w.assigned_to IS NOT NULL`
	// gatedRunning counts type $t's gated tasks in progress (of key $k when
	// given) through worker_tasks_gated_running.
	gatedRunning = `(SELECT count(*) FROM worker_tasks r WHERE r.task_type_id = $t AND r.status = 'in_progress' AND r.gated$k)`
)

// claimStatements and lockStatements are the statements runClaims picks
// from, by [waiting][limited].
var (
	claimStatements = map[bool]string{false: claimStatement(false), true: claimStatement(true)}
	lockStatements  = map[bool]map[bool]string{
		false: {false: lockStatement(false, false), true: lockStatement(false, true)},
		true:  {false: lockStatement(true, false), true: lockStatement(true, true)},
	}
)

// claimStatement is the claim (DESIGN §3) for a batch of distinct workers, in
// one statement. Each worker asks for up to want tasks ($4; 1 for the
// single claim) and gets at most its free slots (max_concurrent_tasks less
// the tasks it holds in progress): first the claimable tasks assigned to
// it, then tasks from the pool (priority, then FIFO). The pool's first
// unlocked tasks are dealt out in request order: the first worker takes the
// first of them it still needs, the next worker the following ones, and so
// on. Everything is picked with SKIP LOCKED; the tasks are marked in progress
// and one task.claimed and one assignment row appended per task. A worker
// with no free slot locks nothing, nor does a worker whose row lockWorkers
// did not lock. k numbers each worker's tasks in claim order: its own
// assigned ones first, then the pool's.
//
// Tasks that wait for their run_at or whose type is paused or limited are
// in neither index the pool and a worker's own tasks are read from (their
// predicates say NOT scheduled AND NOT gated): the claim never reads them.
// The tasks of the limited types whose rows lockGates locked come through
// the limited branch (ADR 017):
//   - lim: each type's room now, the least of max_in_progress less its
//     tasks in progress, rate_limit.count less its claims in the window
//     (counted from task.claimed, which carries the type for these tasks),
//     and what the batch could take. The lock statement ran first, so this
//     snapshot sees every earlier claim of the type.
//   - gkeys: for a type with a concurrency key, the keys to take from,
//     walked from the key after the type's cursor (round robin over keys
//     with work, through worker_tasks_gated), each with the tasks it may
//     give: max_in_progress_per_key less its tasks in progress, at most
//     what it has. The walk stops once the room is covered; the keys it
//     passes at their limit are at most the type's tasks in progress.
//   - gcand: the candidates, picked with SKIP LOCKED: per key for a keyed
//     type, from the head of the type's queue for another, and for each
//     worker its own tasks of the type. A type without a key has no key on
//     any task (a change of key rewrites them under the type's lock), so
//     ordering by the key first is the index's order and changes nothing:
//     without it the plan sorted the type's whole backlog.
//   - gok: the candidates within each key's and then each type's room, in
//     claim order, a worker's own tasks first (as for the others). These
//     go to it after its other own tasks (gmine); the rest join the pool's
//     in one order (offer).
//
// Without limited (no unpaused limited type exists), the statement leaves
// these CTEs out, with the offer's merge and the cursor's update: empty,
// they still cost their executor nodes, about 7 % of a claim (ADR 017).
//
// Every SELECT CTE is MATERIALIZED: evaluated once, before the UPDATE. A
// CTE used once is otherwise inlined into the UPDATE, and when the UPDATE
// meets a row changed since its snapshot (an admin's edit), PostgreSQL
// re-checks that row by evaluating the inlined pick again. That second
// evaluation can pair the row with another worker. The test that found it
// ended with one worker given two tasks in a batch and another given none.
//
// The pool is dealt out by slicing one array of its ids rather than by
// joining row numbers: batches run with hash and merge joins off
// (indexLookupsOnly), so a join of two CTEs is a nested loop, quadratic in
// the thousands of tasks a batch of claim-many calls can take.
//
// The UPDATE and the event insert join nothing: each reads what it needs
// for a row from a jsonb object, keyed by task id (pm, a one-row CTE) or
// by worker ($3, built by jsonMap), and the UPDATE reaches its rows by
// primary key through "id = ANY(ids)". Joined to the picked rows instead, the generic plan put
// the ids' index scan under a Materialize node and filtered the join: 20
// million rows compared for a batch of 64 claims of 100 tasks, 4.5 s.
// The object is read as a scalar subquery, "(SELECT m FROM pm)": computed
// once, then passed by reference. Joined as a FROM item, the CTE scan
// copies its row, the whole object, for every row it meets: quadratic
// again (ADR 016).
//
// cnt keeps task_counts (ADR 010): every picked task was pending and due,
// those of the offer unassigned (queued), and all of them are updated (each
// is locked by its pick), so the batch moves n from pending to in progress
// and the offer's from the queue. Nothing is written when nothing was
// claimed. pnd takes them from their cells of pending_counts: each was
// ready, and assigned when it came from mine or gmine (pm carries which,
// as it carries the worker: ADR 031). cur moves each keyed type's cursor
// to the last key it served.
//
// held counts the worker's tasks in progress through worker_tasks_held
// (migration 015), whose predicate is exactly that. The status and
// assignee indexes leave tasks in progress out, so the generic plan cannot
// take them even when the statistics say no task was ever assigned (a
// fresh queue): it took worker_tasks_assignee before, reading the worker's
// whole history on every claim, or worker_tasks_status, reading every
// worker's tasks in progress (ADR 016).
// A LATERAL join, so that it runs once per worker: as a scalar subquery in
// a flattened select list it ran again for the WHERE.
func claimStatement(limited bool) string {
	pick := func(withLimits, without string) string {
		if limited {
			return withLimits
		}
		return without
	}
	return `WITH req AS (
    SELECT worker, want, ord FROM unnest($1::uuid[], $4::int[]) WITH ORDINALITY AS r(worker, want, ord)
), elig AS MATERIALIZED (
    SELECT r.worker, r.ord, least(r.want, u.max_concurrent_tasks - held.n)::int AS want
      FROM req r JOIN users u ON u.id = r.worker AND u.is_worker AND u.active
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM worker_tasks h WHERE h.assigned_to = r.worker AND h.status = 'in_progress') held
     WHERE r.worker = ANY(NULLIF(current_setting('` + claimWorkersSetting + `', true), '')::uuid[])
       AND held.n < u.max_concurrent_tasks
), mine AS MATERIALIZED (
    SELECT e.worker, m.id, row_number() OVER (PARTITION BY e.worker ORDER BY m.priority_rank, m.created_at, m.id) AS k
      FROM elig e CROSS JOIN LATERAL (
        SELECT id, priority_rank, created_at FROM worker_tasks
         WHERE status = 'pending' AND assigned_to = e.worker AND NOT scheduled AND NOT gated AND available_at <= $2
         ORDER BY priority_rank, created_at, id LIMIT e.want FOR UPDATE SKIP LOCKED) m
` + pick(limitedCTEs, "") + `), rest AS MATERIALIZED (
    SELECT e.worker, n.have, e.want - n.have AS need,
           (sum(e.want - n.have) OVER (ORDER BY e.ord) - (e.want - n.have))::int AS before
      FROM elig e CROSS JOIN LATERAL (SELECT count(*)::int AS have FROM (SELECT worker FROM mine` + pick(" UNION ALL SELECT worker FROM gmine", "") + `) h
                                       WHERE h.worker = e.worker) n
     WHERE e.want > n.have
), pool AS MATERIALIZED (
    SELECT coalesce(array_agg(p.id ORDER BY p.priority_rank, p.created_at, p.id), '{}') AS ids FROM (
        SELECT id, priority_rank, created_at FROM worker_tasks
         WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated AND available_at <= $2
         ORDER BY priority_rank, created_at, id LIMIT (SELECT coalesce(sum(need), 0) FROM rest) FOR UPDATE SKIP LOCKED) p
` + pick(limitedOffer, plainOffer) + `), picked AS MATERIALIZED (
    SELECT id, worker, k, true AS a FROM mine
` + pick("    UNION ALL\n    SELECT id, worker, k, true FROM gmine\n", "") + `    UNION ALL
    SELECT s.id, r.worker, r.have + s.i, false FROM rest r CROSS JOIN offer
     CROSS JOIN LATERAL unnest(offer.ids[r.before + 1 : r.before + r.need]) WITH ORDINALITY AS s(id, i)
), pm AS MATERIALIZED (
    SELECT array_agg(id) AS ids, jsonb_object_agg(id, jsonb_build_array(worker, k, a)) AS m FROM picked
), t AS (
    UPDATE worker_tasks w
       SET status = 'in_progress', assigned_to = ((SELECT m FROM pm) -> w.id::text ->> 0)::uuid, started_at = $2, updated_at = $2, version = w.version + 1
     WHERE w.id = ANY((SELECT ids FROM pm)::uuid[])
    RETURNING w.*, ((SELECT m FROM pm) -> w.id::text ->> 1)::bigint AS k, ((SELECT m FROM pm) -> w.id::text ->> 2)::boolean AS was_assigned
), ev AS (
    INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
    SELECT 'task', t.id, t.version, 'task.claimed',
           CASE WHEN t.gated THEN ($3::jsonb -> t.assigned_to::text -> 0) || jsonb_build_object('task_type_id', t.task_type_id)
                ELSE $3::jsonb -> t.assigned_to::text -> 0 END,
           $3::jsonb -> t.assigned_to::text -> 1, $2 FROM t
), asg AS (
    INSERT INTO task_assignments (task_id, version, worker_id, assigned_by, kind, reason, at)
    SELECT t.id, t.version, t.assigned_to, t.assigned_to, 'claimed', '', $2 FROM t
), cnt AS (
    INSERT INTO task_counts AS c (pid, pending, queued, in_progress)
    SELECT pg_backend_pid(), -n, -(SELECT cardinality(ids) FROM offer), n FROM (SELECT count(*) AS n FROM t) x WHERE n > 0
    ON CONFLICT (pid) DO UPDATE SET pending = c.pending + excluded.pending, queued = c.queued + excluded.queued,
        in_progress = c.in_progress + excluded.in_progress
), pnd AS (
    INSERT INTO pending_counts AS pc (pid, task_type_id, priority, state, assigned, tasks)
    SELECT pg_backend_pid(), t.task_type_id, t.priority, 'ready', t.was_assigned, -count(*) FROM t GROUP BY 2, 3, 5 ORDER BY 2, 3, 5
    ` + projections.PendingUpsert + `
` + pick(`), cur AS (
    UPDATE task_types tt SET key_cursor = c.key
      FROM (SELECT type_id, (array_agg(key ORDER BY step DESC))[1] AS key FROM gkeys GROUP BY type_id) c
     WHERE tt.id = c.type_id
`, "") + `)
SELECT ` + taskColumns + `, ` + taskTypeColumns + `, t.k,
       CASE WHEN cardinality(t.depends_on) > 0 THEN ` + inputsOf("t.depends_on") + ` END
  FROM t JOIN task_types tt ON tt.id = t.task_type_id`
}

// limitedCTEs are the claim's limited branch (see claimStatement).
var limitedCTEs = `), lim AS MATERIALIZED (
    ` + limitedTypes("$2", "(SELECT coalesce(sum(want), 0) FROM elig)",
	"tt.id = ANY(NULLIF(current_setting('"+claimGatesSetting+"', true), '')::uuid[])") + `
), gkeys AS MATERIALIZED (
    SELECT l.id AS type_id, k.key, k.take, k.step FROM lim l CROSS JOIN LATERAL (` + keyWalk + `) k
     WHERE l.keyed AND l.room > 0
), gcand AS MATERIALIZED (
    SELECT k.type_id, p.key, NULL::uuid AS worker, p.id, p.priority_rank, p.created_at
      FROM gkeys k CROSS JOIN LATERAL (
        SELECT w.id, w.concurrency_key AS key, w.priority_rank, w.created_at FROM worker_tasks w
         WHERE w.task_type_id = k.type_id AND w.concurrency_key = k.key AND ` + gatedPool + ` AND w.available_at <= $2
         ORDER BY w.priority_rank, w.created_at, w.id LIMIT k.take FOR UPDATE SKIP LOCKED) p
    UNION ALL
    SELECT l.id, NULL, NULL, p.id, p.priority_rank, p.created_at
      FROM lim l CROSS JOIN LATERAL (
        SELECT w.id, w.priority_rank, w.created_at FROM worker_tasks w
         WHERE w.task_type_id = l.id AND ` + gatedPool + ` AND w.available_at <= $2
         ORDER BY w.concurrency_key, w.priority_rank, w.created_at, w.id LIMIT l.room FOR UPDATE SKIP LOCKED) p
     WHERE NOT l.keyed AND l.room > 0
    UNION ALL
    SELECT l.id, p.key, e.worker, p.id, p.priority_rank, p.created_at
      FROM elig e CROSS JOIN lim l CROSS JOIN LATERAL (
        SELECT w.id, w.concurrency_key AS key, w.priority_rank, w.created_at FROM worker_tasks w
         WHERE w.assigned_to = e.worker AND w.task_type_id = l.id AND ` + gatedMine + ` AND w.available_at <= $2
         ORDER BY w.priority_rank, w.created_at, w.id LIMIT least(e.want, l.room) FOR UPDATE SKIP LOCKED) p
     WHERE l.room > 0
), gfree AS MATERIALIZED (
    SELECT c.*, row_number() OVER (PARTITION BY c.type_id, c.key ORDER BY c.worker IS NULL, c.priority_rank, c.created_at, c.id) AS kr,
           CASE WHEN l.keyed THEN l.per_key - ` + running("c.type_id", "c.key") + ` END AS kfree, l.room
      FROM gcand c JOIN lim l ON l.id = c.type_id
), gok AS MATERIALIZED (
    SELECT x.* FROM (
        SELECT f.*, row_number() OVER (PARTITION BY f.type_id ORDER BY f.worker IS NULL, f.priority_rank, f.created_at, f.id) AS tr
          FROM gfree f WHERE f.kfree IS NULL OR f.kr <= f.kfree) x
     WHERE x.tr <= x.room
), gmine AS MATERIALIZED (
    SELECT x.worker, x.id, x.k FROM (
        SELECT g.worker, g.id, e.want, n.have + row_number() OVER (PARTITION BY g.worker ORDER BY g.priority_rank, g.created_at, g.id) AS k
          FROM gok g JOIN elig e ON e.worker = g.worker
         CROSS JOIN LATERAL (SELECT count(*) AS have FROM mine WHERE mine.worker = g.worker) n) x
     WHERE x.k <= x.want
`

// limitedOffer merges the limited types' unassigned picks into the pool's
// order; plainOffer is the pool alone.
var (
	limitedOffer = `), offer AS MATERIALIZED (
    SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM gok WHERE worker IS NULL) THEN (SELECT ids FROM pool) ELSE (
        SELECT coalesce(array_agg(o.id ORDER BY o.priority_rank, o.created_at, o.id), '{}') FROM (
            SELECT w.id, w.priority_rank, w.created_at FROM worker_tasks w WHERE w.id = ANY((SELECT ids FROM pool)::uuid[])
            UNION ALL
            SELECT id, priority_rank, created_at FROM gok WHERE worker IS NULL
            ORDER BY priority_rank, created_at, id LIMIT (SELECT coalesce(sum(need), 0) FROM rest)) o) END AS ids
`
	plainOffer = `), offer AS MATERIALIZED (
    SELECT ids FROM pool
`
)

// limitedTypes selects the unpaused limited types that where picks, with
// what the claim's limited branch needs of each: whether it has a key, the
// per-key limit, its cursor, and its room at time now (SQL), at most bound:
// the least of max_in_progress less its tasks in progress and
// rate_limit.count less its claims in the window, counted from their
// task.claimed events through task_events_gated_claims, within the longest
// window a type may have, which a log partitioned by time prunes to the
// last day's partitions when the statement starts (its plan is generic).
func limitedTypes(now, bound, where string) string {
	return `SELECT tt.id, tt.concurrency_key_path IS NOT NULL AS keyed, tt.max_in_progress_per_key AS per_key, tt.key_cursor,
           least(coalesce(tt.max_in_progress - ` + running("tt.id", "") + `, 2147483647),
                 coalesce(tt.rate_limit_count - win.n, 2147483647), ` + bound + `)::int AS room
      FROM task_types tt
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM task_events e
         WHERE tt.rate_limit_count IS NOT NULL AND e.type = 'task.claimed' AND e.data ? 'task_type_id'
           AND e.data->>'task_type_id' = tt.id::text AND e.occurred_at > ` + now + ` - make_interval(secs => tt.rate_limit_seconds)
           AND e.occurred_at > ` + now + ` - interval '` + fmt.Sprint(int(events.MaxRateWindow.Seconds())) + ` seconds') win
     WHERE ` + where + ` AND tt.gated AND NOT tt.paused`
}

// running is the SQL count of type typ's gated tasks in progress, of key
// when given.
func running(typ, key string) string {
	k := ""
	if key != "" {
		k = " AND r.concurrency_key = " + key
	}
	return strings.NewReplacer("$t", typ, "$k", k).Replace(gatedRunning)
}

// keyWalk lists, for limited type l (a row of lim), the keys a claim takes
// from and how many tasks each may give: from the first key after the
// type's cursor, in key order, wrapping round to the first key once, until
// the keys' takes cover l.room or every key with work was seen. take is
// max_in_progress_per_key less the key's tasks in progress, at most its
// claimable tasks; a key at its limit gives 0 and is passed.
var keyWalk = `WITH RECURSIVE walk(key, first, looped, take, total, step) AS (
        SELECT s.key, s.key, false, tk.take, tk.take, 1
          FROM (SELECT coalesce((SELECT w.concurrency_key FROM worker_tasks w WHERE w.task_type_id = l.id
                                    AND w.concurrency_key > l.key_cursor AND ` + gatedPool + ` ORDER BY w.concurrency_key LIMIT 1),
                                ` + firstKey + `) AS key) s
         CROSS JOIN LATERAL (SELECT ` + keyTake("s.key") + ` AS take) tk
         WHERE s.key IS NOT NULL
      UNION ALL
        SELECT n.key, v.first, n.looped, tk.take, v.total + tk.take, v.step + 1
          FROM walk v
         CROSS JOIN LATERAL (SELECT coalesce(a.key, CASE WHEN NOT v.looped THEN ` + firstKey + ` END) AS key, v.looped OR a.key IS NULL AS looped
               FROM (SELECT (SELECT w.concurrency_key FROM worker_tasks w WHERE w.task_type_id = l.id
                                AND w.concurrency_key > v.key AND ` + gatedPool + ` ORDER BY w.concurrency_key LIMIT 1) AS key) a) n
         CROSS JOIN LATERAL (SELECT ` + keyTake("n.key") + ` AS take) tk
         WHERE v.total < l.room AND n.key IS NOT NULL AND NOT (n.looped AND n.key >= v.first)
    ) SELECT key, take, step FROM walk WHERE take > 0`

// firstKey is the first key of limited type l with claimable tasks.
var firstKey = `(SELECT w.concurrency_key FROM worker_tasks w WHERE w.task_type_id = l.id AND w.concurrency_key IS NOT NULL
                 AND ` + gatedPool + ` ORDER BY w.concurrency_key LIMIT 1)`

// keyTake is how many tasks of key the claim may take for limited type l.
func keyTake(key string) string {
	return `greatest(0, least(l.per_key - ` + running("l.id", key) + `,
        (SELECT count(*) FROM (SELECT 1 FROM worker_tasks w WHERE w.task_type_id = l.id AND w.concurrency_key = ` + key + `
                                  AND ` + gatedPool + ` LIMIT l.per_key) x)))::int`
}

// indexLookupsOnly opens each batch of claims or completions. These
// statements start from at most batchMax requests, and every lookup they
// make has an index, so the right plan is always nested loops over index
// scans, whatever the planner believes about the table's size. pgx prepares
// each statement once per connection, and PostgreSQL settles on a generic
// plan after five runs. A generic plan made while worker_tasks was small (a
// fresh database, or a burst of new tasks before autovacuum's next ANALYZE)
// can be wrong for as long as the connection lives. taskbench lanes
// (store+create, 16 workers) met these:
//   - a sequential scan for every worker in every batch: 35 million rows
//     read in 9 s, at 0.4 x the throughput;
//   - a bitmap scan for the capacity count, which reads every dead index
//     entry of the worker's earlier claims, since bitmap scans never mark
//     them dead.
//
// Merge and hash joins are off as well, so every join is a nested loop
// from the few request rows. One wrong plan no setting prevents: after an
// ANALYZE that recorded worker_tasks as empty, every index path costs zero
// and the planner picked unrelated indexes (the UPDATE found each picked id
// by scanning worker_tasks_status), reading 34 million index entries in one
// run. Statistics prevent that one (see taskbench lanes's reset).
//
// The plan is forced generic too: left to choose, PostgreSQL kept planning
// the claim afresh for every small batch (a custom plan knows the arrays are
// short, so it always looked cheaper than the generic one), which cost a lone
// worker about 300 us of PostgreSQL CPU per task. force_custom_plan instead
// would fix the first wrong plan above, but paid for planning the claim in
// every batch: about 150 us more per task at 16 workers.
// set_config(..., true) lasts until the batch's implicit transaction ends.
// SET LOCAL would do the same but logs a warning every time outside an
// explicit transaction block.
const indexLookupsOnly = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true)`

// claimRequest is one worker's claim of up to want tasks, its event data
// and meta marshalled.
type claimRequest struct {
	worker, data, meta string
	want               int
}

// MaxClaimMany bounds the tasks one ClaimMany call may ask for.
const MaxClaimMany = 100

// Claim gives workerID its next task, or nil when nothing is claimable or
// the worker is at its max_concurrent_tasks. Concurrent claims of different
// workers share one statement (see batcher).
func (db *DB) Claim(ctx context.Context, workerID string, meta events.Meta) (*TaskWithType, error) {
	tasks, err := db.ClaimMany(ctx, workerID, 1, meta)
	if err != nil || len(tasks) == 0 {
		return nil, err
	}
	return tasks[0], nil
}

// ClaimMany gives workerID up to max tasks (1 to MaxClaimMany), never more
// than its free slots, in claim order: the tasks assigned to it first, then
// the pool's by priority and age. Each is claimed exactly as by Claim, with
// its own task.claimed event. Empty when nothing is claimable.
func (db *DB) ClaimMany(ctx context.Context, workerID string, max int, meta events.Meta) ([]*TaskWithType, error) {
	if max < 1 || max > MaxClaimMany {
		return nil, events.Invalid("max", "must be from 1 to %d", MaxClaimMany)
	}
	// Canonical form: the batch matches claimed rows to requests by it.
	w, err := uuid.Parse(workerID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a worker id", events.ErrForbidden, workerID)
	}
	workerID = w.String()
	data, err := json.Marshal(events.TaskClaimed{WorkerID: workerID})
	if err != nil {
		return nil, err
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	req := claimRequest{worker: workerID, data: string(data), meta: string(metaJSON), want: max}
	tasks, err := db.claims.do(ctx, req)
	if errors.Is(err, errWorkerLocked) {
		// Another transaction holds the worker's row: wait for it here,
		// alone, under the caller's deadline, while the batches go on.
		var outs []outcome[[]*TaskWithType]
		outs, err = db.claimAlone(ctx, req)
		if err != nil {
			return nil, mapErr(err)
		}
		tasks, err = outs[0].res, outs[0].err
	}
	return tasks, err
}

// errWorkerLocked answers a batched claim whose worker's row another
// transaction held; Claim runs it again alone.
var errWorkerLocked = errors.New("the worker's row is locked by another transaction")

// claimBatch runs a batch of claims of distinct workers as one implicit
// transaction; a worker whose row is locked elsewhere gets errWorkerLocked.
func (db *DB) claimBatch(ctx context.Context, reqs []claimRequest) ([]outcome[[]*TaskWithType], error) {
	return db.runClaims(ctx, reqs, false)
}

// claimAlone runs one claim, waiting for its worker's row.
func (db *DB) claimAlone(ctx context.Context, req claimRequest) ([]outcome[[]*TaskWithType], error) {
	return db.runClaims(ctx, []claimRequest{req}, true)
}

// runClaims runs claims of distinct workers, with the limited branch while
// the last batch saw an unpaused limited type (db.limited). A batch run
// without it that finds one (a type limited since, on any instance) claims
// again with it, for the workers still short, before it answers: their
// tasks were left out, never taken past a limit, and must not wait for the
// next wake.
func (db *DB) runClaims(ctx context.Context, reqs []claimRequest, waiting bool) ([]outcome[[]*TaskWithType], error) {
	limited := db.limited.Load()
	outs, live, err := db.runClaimStatements(ctx, reqs, waiting, limited)
	if err != nil {
		return nil, err
	}
	db.limited.Store(live)
	if limited || !live {
		return outs, nil
	}
	var short []claimRequest
	var at []int
	for i, r := range reqs {
		if outs[i].err == nil && len(outs[i].res) < r.want {
			r.want -= len(outs[i].res)
			short, at = append(short, r), append(at, i)
		}
	}
	if len(short) == 0 {
		return outs, nil
	}
	more, live, err := db.runClaimStatements(ctx, short, waiting, true)
	if err != nil {
		return outs, nil // the first claim committed; the rest waits for the next wake
	}
	db.limited.Store(live)
	for j, i := range at {
		outs[i].res = append(outs[i].res, more[j].res...)
	}
	return outs, nil
}

// runClaimStatements runs claims of distinct workers as one implicit
// transaction, and tells whether an unpaused limited type exists.
func (db *DB) runClaimStatements(ctx context.Context, reqs []claimRequest, waiting, limited bool) ([]outcome[[]*TaskWithType], bool, error) {
	n := len(reqs)
	workers, wants := make([]string, n), make([]int32, n)
	m := jsonMap{}
	for i, r := range reqs {
		workers[i], wants[i] = r.worker, int32(r.want)
		m.add(r.worker, r.data, r.meta)
	}
	b := &pgx.Batch{}
	b.Queue(indexLookupsOnly)
	b.Queue(lockStatements[waiting][limited], workers)
	b.Queue(claimStatements[limited], workers, db.Now(), m.String(), wants)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()

	if _, err := br.Exec(); err != nil {
		return nil, false, fmt.Errorf("claim: %w", err)
	}
	// locked[w] exists when w is a worker, and is true when this batch
	// holds its row.
	locked := make(map[string]bool, n)
	rows, err := br.Query()
	if err != nil {
		return nil, false, fmt.Errorf("claim: lock workers: %w", err)
	}
	var (
		id                 string
		isLocked           bool
		workerSet, gateSet string
		live               = true // no worker row: keep the branch
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &isLocked, &workerSet, &gateSet, &live}, func() error { locked[id] = isLocked; return nil }); err != nil {
		return nil, false, fmt.Errorf("claim: lock workers: %w", err)
	}

	type numbered struct {
		k int64
		t *TaskWithType
	}
	claimed := make(map[string][]numbered, n)
	rows, err = br.Query()
	if err != nil {
		return nil, false, fmt.Errorf("claim: %w", err)
	}
	for rows.Next() {
		out := &TaskWithType{TaskType: &events.TaskType{}}
		var k int64
		var inputs []byte
		if err := rows.Scan(append(append(taskDest(&out.Task), taskTypeDest(out.TaskType)...), &k, &inputs)...); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("claim: %w", err)
		}
		normalizeTask(&out.Task)
		if len(out.DependsOn) > 0 {
			if out.Inputs, err = decodeInputs(&out.Task, inputs); err != nil {
				rows.Close()
				return nil, false, fmt.Errorf("claim: %w", err)
			}
		}
		claimed[*out.AssignedTo] = append(claimed[*out.AssignedTo], numbered{k, out})
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("claim: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, false, fmt.Errorf("claim: %w", err)
	}
	if len(claimed) > 0 {
		for _, got := range claimed {
			for _, g := range got {
				db.metrics.appended.WithLabelValues("task.claimed").Inc()
				db.metrics.claimed(&g.t.Task)
			}
		}
		if limited {
			// A claim of a rate-limited type may have filled its window:
			// the due timer, which sleeps through claims, must look to set
			// its timer for the window's end. Limited types are rare.
			db.afterCommit()
		} else {
			db.afterCommit(claimedType)
		}
	}

	outs := make([]outcome[[]*TaskWithType], n)
	for i, r := range reqs {
		isLocked, isWorker := locked[r.worker]
		switch {
		case !isWorker:
			outs[i].err = fmt.Errorf("%w: %s is not a worker", events.ErrForbidden, r.worker)
			continue
		case !isLocked:
			outs[i].err = errWorkerLocked
			continue
		}
		got := claimed[r.worker]
		slices.SortFunc(got, func(a, b numbered) int { return cmp.Compare(a.k, b.k) })
		tasks := make([]*TaskWithType, len(got))
		for j, g := range got {
			tasks[j] = g.t
		}
		outs[i].res = tasks
	}
	return outs, live, nil
}
