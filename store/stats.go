package store

import (
	"context"
	"fmt"
)

// Stats is the admin dashboard's summary.
type Stats struct {
	ByStatus   map[string]int `json:"by_status"`
	QueueDepth int            `json:"queue_depth"`
	// Scheduled counts the pending tasks waiting for their run_at, which
	// QueueDepth leaves out.
	Scheduled     int `json:"scheduled"`
	WorkersOnline int `json:"workers_online"`
	WorkersTotal  int `json:"workers_total"`
	ReactorStats
}

// Stats counts tasks per status, the queue and the workers online. The task
// totals come from task_counts; nothing here reads finished history.
func (db *DB) Stats(ctx context.Context) (*Stats, error) {
	c, err := db.Counts(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	s := &Stats{ByStatus: map[string]int{"blocked": c.Blocked, "pending": c.Pending, "in_progress": c.InProgress, "completed": c.Completed,
		"failed": c.Failed, "cancelled": c.Cancelled}, QueueDepth: c.Queued, Scheduled: c.Scheduled}
	if s.WorkersOnline, s.WorkersTotal, err = db.WorkerCounts(ctx); err != nil {
		return nil, err
	}
	if s.ReactorStats, err = db.reactorStats(ctx); err != nil {
		return nil, err
	}
	s.FailedAwaitingRetry, s.RetriesExhausted, s.RetriesSkipped = c.AwaitingRetry, c.RetriesExhausted, c.RetriesSkipped
	return s, nil
}

// Capacity is the fleet's room for more work.
type Capacity struct {
	// AccountPage is one page of the workers, by name (as GET /admin/workers).
	AccountPage
	TotalSlots     int `json:"total_slots"`
	UsedSlots      int `json:"used_slots"`
	AvailableSlots int `json:"available_slots"`
	OnlineSlots    int `json:"online_available_slots"`
	QueueDepth     int `json:"queue_depth"`
}

// Capacity is CapacityTotals with one page of the workers (f's; its role
// is the workers'), GET /admin/workers/capacity: a fleet of any size
// answers in the time of one page.
func (db *DB) Capacity(ctx context.Context, f AccountFilter) (*Capacity, error) {
	f.Role = RoleWorker
	page, err := db.ListAccountsPage(ctx, f)
	if err != nil {
		return nil, err
	}
	c, err := db.CapacityTotals(ctx)
	if err != nil {
		return nil, err
	}
	c.AccountPage = *page
	return c, nil
}

// fleetSlots is Capacity's sums without the list: the tasks in progress
// read once through worker_tasks_held and counted per holder, joined to the
// workers, instead of three index probes per worker. Online as
// workerViews says it.
const fleetSlots = `SELECT coalesce(sum(u.max_concurrent_tasks), 0), coalesce(sum(h.n), 0),
       coalesce(sum(greatest(u.max_concurrent_tasks - coalesce(h.n, 0), 0)), 0),
       coalesce(sum(greatest(u.max_concurrent_tasks - coalesce(h.n, 0), 0))
                FILTER (WHERE u.online AND u.last_activity_at > $1 AND u.heartbeat_status IS DISTINCT FROM 'offline'), 0)
  FROM users u
  LEFT JOIN (SELECT assigned_to, count(*) AS n FROM worker_tasks WHERE status = 'in_progress' GROUP BY assigned_to) h
    ON h.assigned_to = u.id
 WHERE u.is_worker`

// CapacityTotals is Capacity without its Workers: what the dashboard shows.
// It costs the workers and the tasks in progress, once each.
func (db *DB) CapacityTotals(ctx context.Context) (*Capacity, error) {
	c := &Capacity{}
	err := db.pool.QueryRow(ctx, fleetSlots, db.Now().Add(-db.offlineAfter)).
		Scan(&c.TotalSlots, &c.UsedSlots, &c.AvailableSlots, &c.OnlineSlots)
	if err != nil {
		return nil, mapErr(fmt.Errorf("capacity: %w", err))
	}
	if c.QueueDepth, err = db.QueueDepth(ctx); err != nil {
		return nil, err
	}
	return c, nil
}
