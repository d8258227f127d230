package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// OpsSample is the cluster-wide state an operator watches, read in one
// round trip (reactors.Monitor turns it into gauges).
type OpsSample struct {
	// QueueDepth counts pending tasks by priority and task type name.
	QueueDepth []QueueDepthRow
	// Backlog counts open tasks waiting, by priority, type name and state
	// (claimable, paused, scheduled, blocked).
	Backlog []BacklogRow
	// Pending and InProgress count tasks in the two live statuses. Terminal
	// statuses grow without bound and are not counted here (their rates are
	// taskservice_task_outcomes_total).
	Pending, InProgress int
	// WorkersOnline, and their slots in use and free.
	WorkersOnline, SlotsUsed, SlotsFree int
	// OutboxPending and OutboxDead count Telegram outbox rows.
	OutboxPending, OutboxDead int
}

// QueueDepthRow is one (priority, type) cell of the queue.
type QueueDepthRow struct {
	Priority, TaskType string
	Tasks              int
}

// BacklogRow is one (priority, type, state) cell of the backlog.
type BacklogRow struct {
	Priority, TaskType, State string
	Tasks                     int
}

// sampleOps is SampleOps' statement. The task figures come from the
// counters the writers keep (pending_counts, task_counts: ADR 010, 031);
// the slots read each online worker's tasks in progress through
// worker_tasks_held, once per worker: its cost is the fleet, never the
// backlog or the history.
const sampleOps = `
		SELECT 'backlog', p.priority, tt.name, ` + backlogState + `, sum(p.tasks)::bigint
		  FROM pending_counts p JOIN task_types tt ON tt.id = p.task_type_id
		 GROUP BY 2, 3, 4 HAVING sum(p.tasks) <> 0
		UNION ALL
		SELECT 'pids', '', '', '', count(DISTINCT pid) FROM pending_counts
		UNION ALL
		SELECT 'status', 'in_progress', '', '', coalesce(sum(in_progress), 0)::bigint FROM task_counts
		UNION ALL
		SELECT 'workers', '', '', '', count(*) FROM users WHERE is_worker AND online AND last_activity_at > $1
		UNION ALL
		SELECT s.kind, '', '', '', s.n::bigint FROM (
		    SELECT coalesce(sum(least(h.n, u.max_concurrent_tasks)), 0) AS used,
		           coalesce(sum(greatest(u.max_concurrent_tasks - h.n, 0)), 0) AS free
		      FROM users u, LATERAL (SELECT count(*) AS n FROM worker_tasks w
		                              WHERE w.assigned_to = u.id AND w.status = 'in_progress') h
		     WHERE u.is_worker AND u.online AND u.last_activity_at > $1) x
		 CROSS JOIN LATERAL (VALUES ('slots_used', x.used), ('slots_free', x.free)) s(kind, n)
		UNION ALL
		SELECT 'outbox', status, '', '', count(*) FROM telegram_outbox WHERE status IN ('pending', 'dead') GROUP BY status`

// SampleOps reads an OpsSample.
func (db *DB) SampleOps(ctx context.Context) (*OpsSample, error) {
	rows, err := db.pool.Query(ctx, sampleOps, db.Now().Add(-db.offlineAfter))
	if err != nil {
		return nil, mapErr(fmt.Errorf("sample: %w", err))
	}
	defer rows.Close()
	s := &OpsSample{}
	depth := map[[2]string]int{}
	var pids int
	for rows.Next() {
		var kind, a, b, state string
		var n int
		if err := rows.Scan(&kind, &a, &b, &state, &n); err != nil {
			return nil, mapErr(fmt.Errorf("sample: %w", err))
		}
		switch kind {
		case "backlog":
			s.Backlog = append(s.Backlog, BacklogRow{Priority: a, TaskType: b, State: state, Tasks: n})
			if state != BacklogBlocked {
				if _, ok := depth[[2]string{a, b}]; !ok {
					s.QueueDepth = append(s.QueueDepth, QueueDepthRow{Priority: a, TaskType: b})
				}
				depth[[2]string{a, b}] += n
				s.Pending += n
			}
		case "pids":
			pids = n
		case "status":
			s.InProgress = n
		case "workers":
			s.WorkersOnline = n
		case "slots_used":
			s.SlotsUsed = n
		case "slots_free":
			s.SlotsFree = n
		case "outbox":
			if a == "pending" {
				s.OutboxPending = n
			} else {
				s.OutboxDead = n
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("sample: %w", err))
	}
	for i := range s.QueueDepth {
		s.QueueDepth[i].Tasks = depth[[2]string{s.QueueDepth[i].Priority, s.QueueDepth[i].TaskType}]
	}
	if err := db.compactPendingIfMany(ctx, pids); err != nil {
		return nil, err
	}
	return s, nil
}

// HorizonBlocker is the oldest transaction in the cluster that holds an
// xid: consumers read below pg_snapshot_xmin, which it holds back (DESIGN
// §2), whatever database it runs in.
type HorizonBlocker struct {
	PID         int
	Database    string
	Application string
	User        string
	State       string
	XactStart   time.Time
	QueryStart  *time.Time
	// Age is how long the transaction has been open.
	Age time.Duration
}

// OldestTransaction finds the HorizonBlocker; nil when no other transaction
// holds an xid. pg_stat_activity shows other roles' transactions only to a
// role with pg_read_all_stats (pg_monitor); without it, they are not seen
// (docs/ops/horizon.md).
func (db *DB) OldestTransaction(ctx context.Context) (*HorizonBlocker, error) {
	var b HorizonBlocker
	var age float64
	err := db.pool.QueryRow(ctx, `SELECT pid, coalesce(datname, ''), coalesce(application_name, ''),
		       coalesce(usename, ''), coalesce(state, ''), xact_start, query_start,
		       extract(epoch FROM clock_timestamp() - xact_start)
		  FROM pg_stat_activity
		 WHERE backend_xid IS NOT NULL AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
		 ORDER BY xact_start LIMIT 1`).
		Scan(&b.PID, &b.Database, &b.Application, &b.User, &b.State, &b.XactStart, &b.QueryStart, &age)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		return nil, mapErr(fmt.Errorf("oldest transaction: %w", err))
	}
	b.Age = time.Duration(age * float64(time.Second))
	return &b, nil
}

// poolCollector exports the pool's statistics at scrape time.
type poolCollector struct {
	pool                                         *pgxpool.Pool
	conns, acquires, waits, emptyWaits, canceled *prometheus.Desc
}

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	return &poolCollector{pool: pool,
		conns: prometheus.NewDesc("taskservice_db_pool_connections",
			"Database pool connections by state: acquired, idle, constructing, max.", []string{"state"}, nil),
		acquires: prometheus.NewDesc("taskservice_db_pool_acquires_total",
			"Connections handed out by the pool.", nil, nil),
		waits: prometheus.NewDesc("taskservice_db_pool_acquire_wait_seconds_total",
			"Time spent waiting for a pool connection.", nil, nil),
		emptyWaits: prometheus.NewDesc("taskservice_db_pool_empty_acquires_total",
			"Acquires that had to wait because no connection was idle.", nil, nil),
		canceled: prometheus.NewDesc("taskservice_db_pool_canceled_acquires_total",
			"Acquires given up by their caller before a connection came.", nil, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.acquires, c.waits, c.emptyWaits, c.canceled} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.MaxConns()), "max")
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, s.AcquireDuration().Seconds())
	ch <- prometheus.MustNewConstMetric(c.emptyWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.canceled, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
}
