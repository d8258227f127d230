package store

import (
	"context"
	"fmt"
)

// Claimable is what a claim could find now, read without claiming.
type Claimable struct {
	// Pool counts the unassigned tasks claimable now, up to the limit asked.
	Pool int
	// Assigned lists the workers, among those asked about, that have tasks
	// assigned to them and claimable now.
	Assigned []string
}

// Claimable reads what claims by workers could find now: the pool's
// claimable tasks (counted up to limit) and which of workers have claimable
// tasks of their own. The long-poll asks it on every wake to decide which
// waiting claims run (api, ADR 016). It is one read: unlike a claim that
// finds nothing, it takes no lock and no transaction id and writes no WAL.
// Tasks that another transaction is claiming right now still count.
func (db *DB) Claimable(ctx context.Context, workers []string, limit int) (Claimable, error) {
	var c Claimable
	err := db.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM (SELECT 1 FROM worker_tasks
     WHERE status = 'pending' AND assigned_to IS NULL AND NOT scheduled AND NOT gated AND available_at <= $1 LIMIT $3) p)::int,
  ARRAY(SELECT DISTINCT assigned_to::text FROM worker_tasks
     WHERE status = 'pending' AND assigned_to = ANY($2::uuid[]) AND NOT scheduled AND NOT gated AND available_at <= $1)`,
		db.Now(), workers, limit).Scan(&c.Pool, &c.Assigned)
	if err != nil {
		return Claimable{}, fmt.Errorf("claimable: %w", err)
	}
	return c, nil
}
