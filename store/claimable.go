package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Claimable is what a claim could find now, read without claiming.
type Claimable struct {
	// Pool counts the unassigned tasks claimable now, up to the limit asked.
	Pool int
	// Assigned lists the workers, among those asked about, that have tasks
	// assigned to them and claimable now.
	Assigned []string
	// Limited says that an unpaused limited type exists: a completion of
	// one of its tasks may make room for more.
	Limited bool
}

// Claimable reads what claims by workers could find now: the pool's
// claimable tasks (counted up to limit) and which of workers have claimable
// tasks of their own. The long-poll asks it on every wake to decide which
// waiting claims run (api, ADR 016). It is one read: unlike a claim that
// finds nothing, it takes no lock and no transaction id and writes no WAL.
// Tasks that another transaction is claiming right now still count.
//
// The limited types' tasks count as the claim's limited branch would take
// them now: up to each type's room, and for a keyed type up to each key's
// (the same walk over its keys, without locks). So a limit that is full
// wakes no waiter, and the slot a completion frees wakes as many as it can
// serve.
//
// While no unpaused limited type exists (db.limited, which the claims keep
// too) it reads the plain pool and the assigned tasks only: the statement
// with the limited branch costs several times more to start and to plan,
// on every wake. The plain read also asks whether a limited type exists
// now (one created since, on any instance); if one does, it reads again
// with the branch, so its tasks are never left out.
func (db *DB) Claimable(ctx context.Context, workers []string, limit int) (Claimable, error) {
	if !db.limited.Load() {
		c, err := db.claimable(ctx, claimablePlainSQL, workers, limit)
		if err != nil || !c.Limited {
			return c, err
		}
	}
	c, err := db.claimable(ctx, claimableSQL, workers, limit)
	if err == nil {
		db.limited.Store(c.Limited)
	}
	return c, err
}

// claimable runs one of the looks. A plain look that finds a limited type
// sets db.limited, for the claims too.
func (db *DB) claimable(ctx context.Context, sql string, workers []string, limit int) (Claimable, error) {
	var c Claimable
	b := &pgx.Batch{}
	if sql == claimablePlainSQL {
		// Under genericPlan alone its plan, made while worker_tasks was
		// small, read 36 buffers a look in one bench run against 8 in the
		// others. Every lookup it makes has an index, as the claim's.
		b.Queue(indexLookupsOnly)
	} else {
		b.Queue(genericPlan)
	}
	b.Queue(sql, db.Now(), workers, limit).QueryRow(func(row pgx.Row) error {
		return row.Scan(&c.Pool, &c.Assigned, &c.Limited)
	})
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		return Claimable{}, fmt.Errorf("claimable: %w", err)
	}
	if c.Limited {
		db.limited.Store(true)
	}
	return c, nil
}

// genericPlan makes the statements after it in a batch (its implicit
// transaction) run their generic plan from the first execution on a
// connection. Left to choose, PostgreSQL plans a statement afresh for its
// first five executions on each connection before it settles on the
// generic plan; for the look, with its limited branches, that is 10 ms or
// more of planning each, which a long-poll waiting on a fresh connection
// paid before its wake.
const genericPlan = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

var claimableSQL = `WITH lim AS MATERIALIZED (
    ` + limitedTypes("$1::timestamptz", "$3", "true") + `
)
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM worker_tasks
     WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated AND available_at <= $1 LIMIT $3) p)::int
  + coalesce((SELECT sum(CASE WHEN l.keyed THEN (SELECT sum(k.take) FROM (` + keyWalk + `) k)
                ELSE (SELECT count(*) FROM (SELECT 1 FROM worker_tasks w WHERE w.task_type_id = l.id AND w.concurrency_key IS NULL
                                               AND ` + gatedPool + ` LIMIT l.room) x) END)
              FROM lim l WHERE l.room > 0), 0)::int,
  ARRAY(SELECT DISTINCT assigned_to::text FROM worker_tasks
     WHERE status = 'pending' AND assigned_to = ANY($2::uuid[]) AND NOT scheduled AND NOT gated AND available_at <= $1
    UNION
    SELECT DISTINCT w.assigned_to::text FROM lim l JOIN worker_tasks w ON w.assigned_to = ANY($2::uuid[]) AND w.task_type_id = l.id
     WHERE l.room > 0 AND ` + gatedMine + `),
  ` + limitsLive

// claimablePlainSQL is claimableSQL without the limited types' tasks, for
// while no unpaused limited type exists (it says whether one does).
var claimablePlainSQL = `SELECT
  (SELECT count(*) FROM (SELECT 1 FROM worker_tasks
     WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated AND available_at <= $1 LIMIT $3) p)::int,
  ARRAY(SELECT DISTINCT assigned_to::text FROM worker_tasks
     WHERE status = 'pending' AND assigned_to = ANY($2::uuid[]) AND NOT scheduled AND NOT gated AND available_at <= $1),
  ` + limitsLive
