package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// createRequest is one task creation.
type createRequest struct {
	params NewTaskParams
	meta   events.Meta
}

// CreateTask creates a task; params must already satisfy the type's schema.
// A missing or archived type or a missing assignee is a validation error on
// that field; a unique key another task holds is an
// *events.DuplicateTaskError. Outside a caller's transaction, concurrent
// creations share one round trip and one commit (see batcher).
func (db *DB) CreateTask(ctx context.Context, q Querier, p NewTaskParams, meta events.Meta) (*events.Task, error) {
	if q = db.ambient(ctx, q); q != Querier(db.pool) {
		outs, err := db.createTasks(ctx, q, []createRequest{{params: p, meta: meta}})
		if err != nil {
			return nil, mapErr(err)
		}
		return outs[0].res, outs[0].err
	}
	return db.creations.do(ctx, createRequest{params: p, meta: meta})
}

// Created is one task of CreateTasks: the task, or why it was not created.
type Created struct {
	Task *events.Task
	Err  error
}

// MaxCreateTasks bounds one CreateTasks call (the batch route's items).
const MaxCreateTasks = 1000

// bulkCreateSlots bounds the CreateTasks calls of one instance that write
// at once; the others wait their turn in Go. Batches of a thousand rows
// written side by side contend in PostgreSQL for the same index pages: 16
// at once cost 2.7 times the CPU per task of 2 at once, and made fewer
// tasks a second (ADR 018).
const bulkCreateSlots = 2

// CreateTasks creates tasks in one transaction: each is checked on its own
// (type, assignee, unique key) and answered in order; the good ones are
// written together, a few multi-row statements for them all. Params must
// already satisfy their types' schemas.
func (db *DB) CreateTasks(ctx context.Context, q Querier, ps []NewTaskParams, meta events.Meta) ([]Created, error) {
	if len(ps) > MaxCreateTasks {
		return nil, events.Invalid("tasks", "has %d items; send at most %d", len(ps), MaxCreateTasks)
	}
	select {
	case db.bulkCreates <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-db.bulkCreates }()
	reqs := make([]createRequest, len(ps))
	for i, p := range ps {
		reqs[i] = createRequest{params: p, meta: meta}
	}
	q = db.ambient(ctx, q)
	var outs []outcome[*events.Task]
	run := func(q Querier) (err error) {
		outs, err = db.createTasks(ctx, q, reqs)
		return err
	}
	var err error
	if _, inTx := q.(pgx.Tx); inTx {
		err = run(q)
	} else {
		err = db.WithTx(ctx, func(tx pgx.Tx) error { return run(tx) })
	}
	if err != nil {
		return nil, mapErr(err)
	}
	created := make([]Created, len(outs))
	for i, o := range outs {
		created[i] = Created{Task: o.res, Err: o.err}
	}
	return created, nil
}

// createBatch is the creation batcher's run: a batch without unique keys
// runs as two implicit transactions (read, then write); one with keys in a
// transaction, which holds the keys' locks from the read to the commit.
func (db *DB) createBatch(ctx context.Context, reqs []createRequest) ([]outcome[*events.Task], error) {
	if !slices.ContainsFunc(reqs, needsTx) {
		return db.createTasks(ctx, db.pool, reqs)
	}
	var outs []outcome[*events.Task]
	err := db.WithTx(ctx, func(tx pgx.Tx) (err error) {
		outs, err = db.createTasks(ctx, tx, reqs)
		return err
	})
	return outs, err
}

// needsTx reports whether creating r takes locks that must last until the
// commit: a unique key's, or its dependencies' rows.
func needsTx(r createRequest) bool {
	return r.params.UniqueKey != "" || len(r.params.DependsOn) > 0
}

// createTasks creates reqs through q: one round trip reads their types
// (unless handed over), their assignees and, for unique keys, locks the
// keys and reads who holds them; one more writes the tasks that passed.
// Each task is checked on its own; one that fails a check gets its error
// and is not written. Keys need q to be a transaction: the lock must last
// until the tasks are written and committed. The write may carry the
// NOTIFY that announces it (DB.carryNotify).
func (db *DB) createTasks(ctx context.Context, q Querier, reqs []createRequest) ([]outcome[*events.Task], error) {
	outs := make([]outcome[*events.Task], len(reqs))
	for i, r := range reqs {
		outs[i].err = events.ValidateUnique(r.params.UniqueKey, r.params.UniqueFor)
	}
	now := db.Now()
	read, err := db.readForCreate(ctx, q, reqs, outs, now)
	if err != nil {
		return nil, err
	}
	depsLeft, err := db.decideDependencies(ctx, q, reqs, outs)
	if err != nil {
		return nil, err
	}
	var tasks []*events.Task
	var evs []events.Envelope
	created := map[uniqueKey]string{} // keys taken by tasks earlier in reqs
	for i, r := range reqs {
		if outs[i].err != nil {
			continue
		}
		p := r.params
		tt := p.TaskType
		if tt == nil {
			tt = read.types[canonicalUUID(p.TaskTypeID)]
		}
		switch {
		case tt == nil:
			outs[i].err = events.UnknownReference("task_type_id", "task type", p.TaskTypeID)
			continue
		case p.AssignedTo != "" && !read.workers[canonicalUUID(p.AssignedTo)]:
			outs[i].err = events.UnknownReference("assigned_to", "worker", p.AssignedTo)
			continue
		}
		k := uniqueKey{typeID: tt.ID, key: p.UniqueKey}
		if p.UniqueKey != "" {
			holder := read.holders[i]
			if holder == "" {
				holder = created[k]
			}
			if holder != "" {
				outs[i].err = &events.DuplicateTaskError{UniqueKey: p.UniqueKey, TaskID: holder}
				continue
			}
		}
		ps, err := events.NewTask(p.NewTaskParams, tt)
		if err != nil {
			outs[i].err = err
			continue
		}
		id := p.ID
		if id == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("new task id: %w", err)
			}
			id = u.String()
		}
		tevs, err := stamp(events.StreamTask, id, 0, ps, r.meta, now)
		if err != nil {
			outs[i].err = err
			continue
		}
		t := &events.Task{}
		for _, e := range tevs {
			t.Apply(e)
		}
		if p.UniqueKey != "" {
			created[k] = t.ID
		}
		outs[i].res = t
		tasks = append(tasks, t)
		evs = append(evs, tevs...)
	}
	if len(tasks) == 0 {
		return outs, nil
	}
	b := &pgx.Batch{}
	if err := db.projector.NewTasks(b, tasks, evs); err != nil {
		return nil, err
	}
	queueDepsLeft(b, outs, depsLeft)
	if err := queueEvents(b, evs); err != nil {
		return nil, err
	}
	// A pool task claimable at once: any waiter may take it, so the longest
	// waiting may claim without the claim gate's read (Hub.Unblocked). A
	// task assigned to someone is left to the read, which finds its worker.
	claimable := slices.ContainsFunc(tasks, func(t *events.Task) bool {
		return t.Status == events.StatusPending && !t.Scheduled && t.AssignedTo == nil
	})
	// Only a create of a rate-limited type may wait for a window's end.
	rated := slices.ContainsFunc(reqs, func(r createRequest) bool {
		tt := r.params.TaskType
		if tt == nil {
			tt = read.types[canonicalUUID(r.params.TaskTypeID)]
		}
		return tt != nil && tt.RateLimit != nil
	})
	types := wokenTypes(evs, rated)
	carried, carrying := db.carryNotify(ctx, q, b, types, claimable)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	if carrying {
		// The NOTIFY went with the commit; carried wakes this instance.
		db.onCommit(q, func() { db.metrics.observe(evs, nil) })
		carried()
	} else {
		db.wroteNaming(q, evs, nil, types)
	}
	if claimable {
		// As for a completion that unblocks tasks: a waiting claim here may
		// take one at once, without the claim gate's read (Hub.Unblocked).
		db.onCommit(q, db.afterUnblock)
	}
	return outs, nil
}

// uniqueKey is a unique key within its task type.
type uniqueKey struct{ typeID, key string }

// lockID is the key's advisory lock: a 32-bit hash under its own class, so
// it never meets another lock of the service. Two keys that share a hash
// only wait for each other.
func (k uniqueKey) lockID() int32 {
	h := fnv.New32a()
	h.Write([]byte(k.typeID))
	h.Write([]byte{0})
	h.Write([]byte(k.key))
	return int32(h.Sum32())
}

// uniqueLockClass is the first half of every unique key's advisory lock.
const uniqueLockClass = 0x756e71 // "unq"

// createReads is what a batch of creations reads before it decides.
type createReads struct {
	types   map[string]*events.TaskType
	workers map[string]bool
	holders map[int]string // by request index: the task that holds its key
}

// readForCreate reads, in one round trip, the task types the requests name
// (those the caller did not hand over), which of their assignees are
// workers, and for the requests with a unique key (outs[i].err nil), after
// locking the keys in a fixed order, the task that holds each: pending or
// in progress, or completed within the request's window before now.
// Nothing is read when there is nothing to read.
func (db *DB) readForCreate(ctx context.Context, q Querier, reqs []createRequest, outs []outcome[*events.Task], now time.Time) (*createReads, error) {
	read := &createReads{types: map[string]*events.TaskType{}, workers: map[string]bool{}, holders: map[int]string{}}
	var typeIDs, assignees []string
	var keyed []int
	for i, r := range reqs {
		if r.params.TaskType == nil {
			typeIDs = append(typeIDs, r.params.TaskTypeID)
		}
		if r.params.AssignedTo != "" {
			assignees = append(assignees, r.params.AssignedTo)
		}
		if r.params.UniqueKey != "" && outs[i].err == nil && validUUID(typeIDOf(r.params)) {
			keyed = append(keyed, i)
		}
	}
	if len(typeIDs) == 0 && len(assignees) == 0 && len(keyed) == 0 {
		return read, nil
	}
	if len(keyed) > 0 {
		if _, inTx := q.(pgx.Tx); !inTx {
			return nil, errors.New("create task: unique keys need a transaction")
		}
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+taskTypeColumns+` FROM task_types tt WHERE tt.id = ANY($1::uuid[])`, typeIDs)
	b.Queue(`SELECT id::text FROM users WHERE id = ANY($1::uuid[]) AND is_worker AND active`, assignees)
	if len(keyed) > 0 {
		queueUniqueReads(b, reqs, keyed, now)
	}
	br := q.SendBatch(ctx, b)
	defer br.Close()

	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("create task: read types: %w", err)
	}
	for rows.Next() {
		tt := &events.TaskType{}
		if err := rows.Scan(taskTypeDest(tt)...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("create task: read types: %w", err)
		}
		tt.CreatedAt, tt.UpdatedAt = tt.CreatedAt.UTC(), tt.UpdatedAt.UTC()
		read.types[tt.ID] = tt
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("create task: read types: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, fmt.Errorf("create task: read assignees: %w", err)
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { read.workers[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("create task: read assignees: %w", err)
	}
	if len(keyed) > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("create task: lock unique keys: %w", err)
		}
		rows, err = br.Query()
		if err != nil {
			return nil, fmt.Errorf("create task: read unique keys: %w", err)
		}
		var i int
		if _, err := pgx.ForEachRow(rows, []any{&i, &id}, func() error { read.holders[keyed[i-1]] = id; return nil }); err != nil {
			return nil, fmt.Errorf("create task: read unique keys: %w", err)
		}
	}
	return read, br.Close()
}

// lockUniqueKeys takes the keys' transaction-scoped advisory locks in
// ascending order, so two transactions never wait on each other in a cycle.
// Every writer that gives a task a key takes it first (creations and
// retries): the reads after it see every task the key's earlier writers
// committed.
const lockUniqueKeys = `SELECT pg_advisory_xact_lock($1::int4, k) FROM unnest($2::int4[]) AS k`

// readUniqueHolders finds, for each (type, key, window in seconds), the
// task that holds the key: pending or in progress (worker_tasks_unique_active),
// else the last completed within the window before $4
// (worker_tasks_unique_completed). i is the 1-based position in the arrays.
const readUniqueHolders = `SELECT k.i::int, h.id::text
  FROM unnest($1::uuid[], $2::text[], $3::float8[]) WITH ORDINALITY AS k(type_id, key, window_s, i)
 CROSS JOIN LATERAL (
    (SELECT t.id FROM worker_tasks t
      WHERE t.task_type_id = k.type_id AND t.unique_key = k.key AND t.status IN ('pending', 'in_progress'))
    UNION ALL
    (SELECT t.id FROM worker_tasks t
      WHERE t.task_type_id = k.type_id AND t.unique_key = k.key AND t.status = 'completed'
        AND k.window_s > 0 AND t.completed_at > $4::timestamptz - make_interval(secs => k.window_s)
      ORDER BY t.completed_at DESC LIMIT 1)
    LIMIT 1) h`

// queueUniqueReads queues the locks of the keyed requests and the read of
// their holders, in the order of keyed.
func queueUniqueReads(b *pgx.Batch, reqs []createRequest, keyed []int, now time.Time) {
	var locks []int32
	types, keys, windows := make([]string, len(keyed)), make([]string, len(keyed)), make([]float64, len(keyed))
	for j, i := range keyed {
		p := reqs[i].params
		k := uniqueKey{typeID: canonicalUUID(typeIDOf(p)), key: p.UniqueKey}
		locks = append(locks, k.lockID())
		types[j], keys[j], windows[j] = k.typeID, k.key, p.UniqueFor.Seconds()
	}
	slices.Sort(locks)
	b.Queue(lockUniqueKeys, int32(uniqueLockClass), slices.Compact(locks))
	b.Queue(readUniqueHolders, types, keys, windows, now)
}

// UniqueKeyHolder locks a task type's unique key in tx and returns the
// task that holds it (pending or in progress), "" when none does.
func (db *DB) UniqueKeyHolder(ctx context.Context, tx pgx.Tx, typeID, key string) (string, error) {
	reqs := []createRequest{{params: NewTaskParams{TaskTypeID: typeID, NewTaskParams: events.NewTaskParams{UniqueKey: key}}}}
	b := &pgx.Batch{}
	queueUniqueReads(b, reqs, []int{0}, db.Now())
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return "", mapErr(fmt.Errorf("lock unique key: %w", err))
	}
	var i int
	var holder string
	err := br.QueryRow().Scan(&i, &holder)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", mapErr(fmt.Errorf("read unique key: %w", err))
	}
	return holder, br.Close()
}

// typeIDOf is the id of the request's type.
func typeIDOf(p NewTaskParams) string {
	if p.TaskType != nil {
		return p.TaskType.ID
	}
	return p.TaskTypeID
}

func validUUID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil
}

// canonicalUUID is id as PostgreSQL prints it, the key of what the batch
// reads; id itself when it is no UUID (the read fails on it then).
func canonicalUUID(id string) string {
	u, err := uuid.Parse(id)
	if err != nil {
		return id
	}
	return u.String()
}
