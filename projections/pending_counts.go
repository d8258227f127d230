package projections

import (
	"cmp"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// PendingStates are pending_counts' states (migration 040): a pending task
// claimable by time, one waiting for its run_at, a task waiting for its
// dependencies.
const (
	PendingReady     = "ready"
	PendingScheduled = "scheduled"
	PendingBlocked   = "blocked"
)

// PendingKey is one cell of pending_counts. A paused or limited type's
// tasks are ready here: the gate is the type's, which every open task
// copies, so a read joins task_types to tell them apart (ADR 031).
type PendingKey struct {
	TaskTypeID string
	Priority   events.Priority
	State      string
	Assigned   bool
}

// PendingKeyOf is t's cell; false when t is not open and waiting (in
// progress or ended).
func PendingKeyOf(t *events.Task) (PendingKey, bool) {
	k := PendingKey{TaskTypeID: t.TaskTypeID, Priority: t.Priority, Assigned: t.AssignedTo != nil}
	switch {
	case t.Status == events.StatusBlocked:
		k.State = PendingBlocked
	case t.Status != events.StatusPending:
		return k, false
	case t.Scheduled:
		k.State = PendingScheduled
	default:
		k.State = PendingReady
	}
	return k, true
}

// PendingCounts are the tasks per cell: the one definition of what
// pending_counts counts. The projector, NewTasks and replay use it; the
// store's batched statements compute the same cells in SQL.
type PendingCounts map[PendingKey]int64

// Add adds sign to t's cell, if it has one.
func (c PendingCounts) Add(t *events.Task, sign int64) {
	if k, ok := PendingKeyOf(t); ok {
		if c[k] += sign; c[k] == 0 {
			delete(c, k)
		}
	}
}

// PendingDelta is the change of the cells when a task goes from before
// (nil for a new task) to after.
func PendingDelta(before, after *events.Task) PendingCounts {
	d := PendingCounts{}
	if before != nil {
		d.Add(before, -1)
	}
	d.Add(after, 1)
	return d
}

// Args are the cells as the parameters of AddPending ($1 to $5), in key
// order: the order in which the statement locks this process's rows.
func (c PendingCounts) Args() []any {
	keys := make([]PendingKey, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b PendingKey) int {
		return cmp.Or(cmp.Compare(a.TaskTypeID, b.TaskTypeID), cmp.Compare(a.Priority, b.Priority),
			cmp.Compare(a.State, b.State), cmp.Compare(boolInt(a.Assigned), boolInt(b.Assigned)))
	})
	types, prios, states := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	assigned, tasks := make([]bool, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		types[i], prios[i], states[i], assigned[i], tasks[i] = k.TaskTypeID, string(k.Priority), k.State, k.Assigned, c[k]
	}
	return []any{types, prios, states, assigned, tasks}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// PendingUpsert is the ON CONFLICT clause of every write to pending_counts.
const PendingUpsert = `ON CONFLICT (pid, task_type_id, priority, state, assigned) DO UPDATE SET tasks = pc.tasks + excluded.tasks`

// PendingCell is the SQL of a worker_tasks row's state in pending_counts
// (PendingKeyOf), the row's alias given.
func PendingCell(w string) string {
	return `CASE WHEN ` + w + `.status = 'blocked' THEN 'blocked' WHEN ` + w + `.scheduled THEN 'scheduled' ELSE 'ready' END`
}

// AddPending adds the cells $1 to $5 (PendingCounts.Args) to this server
// process's rows of pending_counts.
const AddPending = `INSERT INTO pending_counts AS pc (pid, task_type_id, priority, state, assigned, tasks)
SELECT pg_backend_pid(), * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bool[], $5::bigint[]) ` + PendingUpsert

// queueCountsAndPending queues the change of task_counts (d, nonzero or
// not) and of pending_counts (p) as one statement when both change.
func queueCountsAndPending(b *pgx.Batch, d Counts, p PendingCounts) {
	switch {
	case len(p) == 0 && d == (Counts{}):
	case len(p) == 0:
		b.Queue(addCounts, countsArgs(d)...)
	case d == (Counts{}):
		b.Queue(AddPending, p.Args()...)
	default:
		b.Queue(addCountsAndPending, append(p.Args(), countsArgs(d)...)...)
	}
}
