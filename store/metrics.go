package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawdbot/task-service/events"
)

// The store counts what it commits, whoever asked for it (the API, a
// reactor, the stuck detector, bootstrap): every path that inserts events
// calls observe once its write has committed, so the counters match the
// rows of task_events.
//
// How metrics are added anywhere in task-service (docs/ops/metrics.md): the
// package that owns what is measured creates its collectors in one
// newXxxMetrics function, registers them on the prometheus.Registerer of
// its Config (nil: unregistered, still usable), names them
// taskservice_<noun>_<unit>[_total] with a bounded set of label values, and
// adds each to docs/ops/metrics.md, which a test compares with a scrape.
type storeMetrics struct {
	appended  *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	queueWait *prometheus.HistogramVec
	runTime   *prometheus.HistogramVec
	usage     *prometheus.CounterVec

	q        Querier
	typeMu   sync.Mutex
	typeName map[string]string // task type id → name, for labels
}

func newStoreMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) (*storeMetrics, error) {
	m := &storeMetrics{
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_events_appended_total",
			Help: "Events this instance appended to task_events, by event type, whoever caused them.",
		}, []string{"type"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_task_outcomes_total",
			Help: "Tasks that ended an attempt, by task type, outcome (completed, failed, cancelled) and failure kind (error, timeout, worker_offline; none unless failed).",
		}, []string{"task_type", "outcome", "failure_kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_retries_total",
			Help: "Retry decisions on failed tasks: created, skipped, exhausted.",
		}, []string{"outcome"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskservice_task_queue_wait_seconds",
			Help:    "Time from a task becoming claimable (created, or available after a retry backoff) to its claim, by priority.",
			Buckets: []float64{.01, .05, .25, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
		}, []string{"priority"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskservice_task_run_seconds",
			Help:    "Time from claim to completion or failure of one attempt, by task type.",
			Buckets: []float64{.1, 1, 5, 15, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600},
		}, []string{"task_type"}),
		usage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_llm_usage_reports_total",
			Help: "LLM usage reports this instance recorded, by task type and where the cost came from: worker (reported), prices (the price table) or unpriced (a model the table does not know, recorded at cost 0).",
		}, []string{"task_type", "cost_source"}),
		q:        pool,
		typeName: map[string]string{},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.appended, m.outcomes, m.retries, m.queueWait, m.runTime, m.usage, newPoolCollector(pool)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("store: register metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts committed events; task, when given, is the state of their
// stream after them (for outcomes, run time and queue wait).
func (m *storeMetrics) observe(evs []events.Envelope, task *events.Task) {
	for _, e := range evs {
		m.appended.WithLabelValues(e.Type).Inc()
		switch e.Type {
		case "task.retried":
			m.retries.WithLabelValues("created").Inc()
		case "task.retry_skipped":
			m.retries.WithLabelValues("skipped").Inc()
		case "task.retries_exhausted":
			m.retries.WithLabelValues("exhausted").Inc()
		}
		if u, ok := e.Payload.(events.TaskUsageReported); ok {
			m.usage.WithLabelValues(m.typeNameOf(u.TaskTypeID), u.CostSource).Inc()
		}
		if task == nil || task.ID != e.StreamID {
			continue
		}
		switch e.Type {
		case "task.claimed":
			m.claimed(task)
		case "task.completed":
			m.finished(task, "completed", "none", e.OccurredAt)
		case "task.cancelled":
			m.finished(task, "cancelled", "none", e.OccurredAt)
		case "task.failed":
			kind := "error"
			if f, ok := e.Payload.(events.TaskFailed); ok && f.Kind != "" {
				kind = f.Kind
			}
			m.finished(task, "failed", kind, e.OccurredAt)
		}
	}
}

// claimed observes a claim's queue wait.
func (m *storeMetrics) claimed(t *events.Task) {
	if t.StartedAt == nil {
		return
	}
	since := t.CreatedAt
	if t.AvailableAt.After(since) {
		since = t.AvailableAt
	}
	m.queueWait.WithLabelValues(string(t.Priority)).Observe(max(t.StartedAt.Sub(since).Seconds(), 0))
}

// finished observes an attempt's end; a task cancelled before any claim
// has no run time.
func (m *storeMetrics) finished(t *events.Task, outcome, kind string, at time.Time) {
	name := m.typeNameOf(t.TaskTypeID)
	m.outcomes.WithLabelValues(name, outcome, kind).Inc()
	if t.StartedAt != nil && outcome != "cancelled" {
		m.runTime.WithLabelValues(name).Observe(max(at.Sub(*t.StartedAt).Seconds(), 0))
	}
}

// typeNameOf is the task type's name, read once per type; "unknown" when
// it cannot be read now (it is asked again next time).
func (m *storeMetrics) typeNameOf(id string) string {
	m.typeMu.Lock()
	name, ok := m.typeName[id]
	m.typeMu.Unlock()
	if ok {
		return name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.q.QueryRow(ctx, `SELECT name FROM task_types WHERE id = $1`, id).Scan(&name); err != nil {
		return "unknown"
	}
	m.typeMu.Lock()
	m.typeName[id] = name
	m.typeMu.Unlock()
	return name
}

// onCommit runs fn once q's write is committed: now for the pool (the
// write was its own implicit transaction), at WithTx's commit for a
// transaction (never when it rolls back).
func (db *DB) onCommit(q Querier, fn func()) {
	tx, inTx := q.(pgx.Tx)
	if !inTx {
		fn()
		return
	}
	db.txMu.Lock()
	db.txHooks[tx] = append(db.txHooks[tx], fn)
	db.txMu.Unlock()
}

// wrote runs, once q's write of evs commits, what follows every event
// write: their metrics, and the wake that names their types (Hub.Wake).
func (db *DB) wrote(q Querier, evs []events.Envelope, task *events.Task) {
	db.wroteNaming(q, evs, task, db.wokenTypes(evs))
}

// wroteNaming is wrote for a write that knows the types its wake names.
func (db *DB) wroteNaming(q Querier, evs []events.Envelope, task *events.Task, types []string) {
	db.onCommit(q, func() {
		db.metrics.observe(evs, task)
		db.afterCommit(types...)
	})
}

// takeHooks removes and returns tx's commit hooks.
func (db *DB) takeHooks(tx pgx.Tx) []func() {
	db.txMu.Lock()
	defer db.txMu.Unlock()
	fns := db.txHooks[tx]
	delete(db.txHooks, tx)
	return fns
}
