package reactors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
)

// MonitorConfig configures the Monitor.
type MonitorConfig struct {
	DB *store.DB
	// Interval between two samples (default 15 s).
	Interval time.Duration
	// StallWarnAfter: a transaction holding the xid horizon back this long
	// is a stall, logged as a warning every StallLogEvery while it lasts
	// (defaults 1 min and 1 min).
	StallWarnAfter, StallLogEvery time.Duration
	// StallAlertAfter: past this, the stall is sent to Telegram once per
	// blocking transaction (default 5 min).
	StallAlertAfter time.Duration
	// Telegram, when enabled, receives the stall alert through the outbox.
	Telegram TelegramConfig
	// Registerer receives the gauges; none when nil.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Monitor samples the cluster-wide state an operator watches into gauges
// (queue depth, live tasks, workers and slots, the Telegram outbox) and
// watches the xid horizon: the oldest transaction holding an xid anywhere
// in the cluster hides every newer event from every consumer (DESIGN §2),
// so its age is exported, logged while it lasts and sent to Telegram past
// a threshold (docs/ops/horizon.md). Every instance samples the same
// values; dashboards and alerts aggregate them with max().
type Monitor struct {
	cfg MonitorConfig
	db  *store.DB
	m   monitorMetrics

	lastWarn    time.Time
	lastBlocker int // pid of the stall last logged
}

type monitorMetrics struct {
	queueDepth *prometheus.GaugeVec
	backlog    *prometheus.GaugeVec
	tasks      *prometheus.GaugeVec
	workers    prometheus.Gauge
	slots      *prometheus.GaugeVec
	outbox     *prometheus.GaugeVec
	horizonAge prometheus.Gauge
	llmTokens  *prometheus.GaugeVec
	llmCost    *prometheus.GaugeVec
	llmBudget  *prometheus.GaugeVec
	errors     prometheus.Counter
}

// NewMonitor checks cfg and fills its defaults; it starts nothing.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
	if cfg.DB == nil {
		return nil, errors.New("reactors: MonitorConfig.DB is required")
	}
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&cfg.Interval, 15*time.Second)
	set(&cfg.StallWarnAfter, time.Minute)
	set(&cfg.StallLogEvery, time.Minute)
	set(&cfg.StallAlertAfter, 5*time.Minute)
	cfg.Telegram = cfg.Telegram.withDefaults()
	mo := &Monitor{cfg: cfg, db: cfg.DB, m: monitorMetrics{
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_queue_depth",
			Help: "Pending tasks by priority and task type (cluster-wide, sampled).",
		}, []string{"priority", "task_type"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_backlog_tasks",
			Help: "Open tasks waiting by priority, task type and state: claimable, paused (its type), scheduled (run_at later), blocked (dependencies) (cluster-wide, sampled).",
		}, []string{"priority", "task_type", "state"}),
		tasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_tasks",
			Help: "Tasks in a live status: pending, in_progress (cluster-wide, sampled).",
		}, []string{"status"}),
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskservice_workers_online",
			Help: "Workers heard from within the offline threshold (cluster-wide, sampled).",
		}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_worker_slots",
			Help: "Task slots (max_concurrent_tasks) of online workers: used, free (cluster-wide, sampled).",
		}, []string{"state"}),
		outbox: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_telegram_outbox",
			Help: "Telegram outbox rows: pending (not sent yet), dead (refused by Telegram) (cluster-wide, sampled).",
		}, []string{"status"}),
		horizonAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "taskservice_xid_horizon_age_seconds",
			Help: "Age of the oldest transaction holding an xid anywhere in the cluster; it hides newer events from every consumer (0: none).",
		}),
		llmTokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_llm_tokens_today",
			Help: "LLM tokens (input, output and both cache kinds) reported today (the team's day, DIGEST_TZ), by task type (cluster-wide, sampled from counters).",
		}, []string{"task_type"}),
		llmCost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_llm_cost_usd_today",
			Help: "LLM cost in US dollars reported or priced today (the team's day, DIGEST_TZ), by task type (cluster-wide, sampled from counters).",
		}, []string{"task_type"}),
		llmBudget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_llm_daily_budget",
			Help: "A task type's daily LLM budget, by unit: tokens or usd (absent: no budget).",
		}, []string{"task_type", "unit"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskservice_monitor_sample_errors_total",
			Help: "Samples of the cluster-wide gauges that failed.",
		}),
	}}
	if err := register(cfg.Registerer, "monitor", mo.m.queueDepth, mo.m.backlog, mo.m.tasks, mo.m.workers, mo.m.slots,
		mo.m.outbox, mo.m.horizonAge, mo.m.llmTokens, mo.m.llmCost, mo.m.llmBudget, mo.m.errors); err != nil {
		return nil, err
	}
	return mo, nil
}

// Run samples until ctx ends.
func (mo *Monitor) Run(ctx context.Context) error {
	ticker := time.NewTicker(mo.cfg.Interval)
	defer ticker.Stop()
	for {
		if err := mo.Sample(ctx); err != nil && ctx.Err() == nil {
			mo.m.errors.Inc()
			mo.cfg.Logger.Warn().Err(err).Msg("cannot sample the queue and the horizon")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Sample reads the state once and updates the gauges; it logs and alerts
// a horizon stall.
func (mo *Monitor) Sample(ctx context.Context) error {
	b, err := mo.db.OldestTransaction(ctx)
	if err != nil {
		return err
	}
	mo.horizon(ctx, b)
	s, err := mo.db.SampleOps(ctx)
	if err != nil {
		return err
	}
	mo.m.queueDepth.Reset()
	for _, r := range s.QueueDepth {
		mo.m.queueDepth.WithLabelValues(r.Priority, r.TaskType).Set(float64(r.Tasks))
	}
	mo.m.backlog.Reset()
	for _, r := range s.Backlog {
		mo.m.backlog.WithLabelValues(r.Priority, r.TaskType, r.State).Set(float64(r.Tasks))
	}
	mo.m.tasks.WithLabelValues("pending").Set(float64(s.Pending))
	mo.m.tasks.WithLabelValues("in_progress").Set(float64(s.InProgress))
	mo.m.workers.Set(float64(s.WorkersOnline))
	mo.m.slots.WithLabelValues("used").Set(float64(s.SlotsUsed))
	mo.m.slots.WithLabelValues("free").Set(float64(s.SlotsFree))
	mo.m.outbox.WithLabelValues("pending").Set(float64(s.OutboxPending))
	mo.m.outbox.WithLabelValues("dead").Set(float64(s.OutboxDead))
	return mo.sampleLLMUsage(ctx)
}

// sampleLLMUsage exports today's LLM usage and budgets per task type: one
// row per type, read by key, whatever the history.
func (mo *Monitor) sampleLLMUsage(ctx context.Context) error {
	types, err := mo.db.TypesUsageToday(ctx)
	if err != nil {
		return err
	}
	mo.m.llmTokens.Reset()
	mo.m.llmCost.Reset()
	mo.m.llmBudget.Reset()
	for _, u := range types {
		mo.m.llmTokens.WithLabelValues(u.Name).Set(float64(u.Usage.Tokens))
		mo.m.llmCost.WithLabelValues(u.Name).Set(u.Usage.CostUSD)
		if b := u.DailyTokenBudget; b != nil {
			mo.m.llmBudget.WithLabelValues(u.Name, "tokens").Set(float64(*b))
		}
		if b := u.DailyCostBudgetUSD; b != nil {
			mo.m.llmBudget.WithLabelValues(u.Name, "usd").Set(*b)
		}
	}
	return nil
}

// horizon exports the blocker's age, warns about a stall every
// StallLogEvery, and past StallAlertAfter sends it to Telegram once per
// blocking transaction (keyed by its start, from any instance).
func (mo *Monitor) horizon(ctx context.Context, b *store.HorizonBlocker) {
	if b == nil {
		mo.m.horizonAge.Set(0)
		return
	}
	mo.m.horizonAge.Set(b.Age.Seconds())
	if b.Age < mo.cfg.StallWarnAfter {
		return
	}
	now := time.Now()
	if b.PID != mo.lastBlocker || now.Sub(mo.lastWarn) >= mo.cfg.StallLogEvery {
		mo.lastBlocker, mo.lastWarn = b.PID, now
		ev := mo.cfg.Logger.Warn().Int("pid", b.PID).Str("database", b.Database).Str("application", b.Application).
			Str("user", b.User).Str("state", b.State).Time("xact_start", b.XactStart).Dur("open_for", b.Age)
		if b.QueryStart != nil {
			ev = ev.Time("query_start", *b.QueryStart)
		}
		ev.Msg("a long transaction holds back the xid horizon: reactors, retries and live tails see no new events until it ends " +
			"(end it with SELECT pg_terminate_backend(pid) if it is stuck; see docs/ops/horizon.md)")
	}
	if b.Age < mo.cfg.StallAlertAfter || !mo.cfg.Telegram.Enabled {
		return
	}
	row := outboxRow{EventSeq: -b.XactStart.UnixMicro(), Kind: kindHorizonStall, ChatID: mo.cfg.Telegram.ChatID,
		Text: stallLine(b), Urgent: true}
	if _, err := insertOutbox(ctx, mo.db.Pool(), []outboxRow{row}, mo.cfg.Telegram.Now()); err != nil {
		mo.cfg.Logger.Warn().Err(err).Msg("cannot record the horizon stall alert")
	}
}

// stallLine is the Telegram alert of a horizon stall.
func stallLine(b *store.HorizonBlocker) string {
	app := b.Application
	if app == "" {
		app = "no application name"
	}
	return fmt.Sprintf("🐢 Consumers stalled: a transaction open for %s holds back every retry and notification "+
		"(pid %d, database %s, %s, started %s UTC). End it or see docs/ops/horizon.md.",
		waited(b.Age), b.PID, esc(b.Database, budgetName), esc(app, budgetName), b.XactStart.UTC().Format("15:04:05"))
}
