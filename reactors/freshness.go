package reactors

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// FreshnessConfig configures a Freshness loop.
type FreshnessConfig struct {
	DB  *store.DB
	Hub *store.Hub
	// Check validates each rendered task's params against its type's
	// schema (the API's validator); nil checks nothing beyond the type.
	Check store.ParamsCheck
	// CatchUp is the slow safety-net look, in case a wake was lost
	// (default 30 s).
	CatchUp time.Duration
	// MinGap is the least time between two looks that wakes cause
	// (default 50 ms): every commit wakes the hub.
	MinGap time.Duration
	// BatchSize is the most keys of one rule a transaction creates tasks
	// for (default 500).
	BatchSize  int
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Freshness creates the tasks of freshness rules for keys whose data is
// stale (ADR 023). Each instance runs one, with one timer set for the
// earliest due time of any watched key, re-armed on every hub wake (a
// completion makes a key due later; a rule's edit, resume or new keys may
// make one due now) and on a slow catch-up tick. A look costs an index
// range of the keys due now, whatever the number of keys watched.
// Instances never create a key's task twice: each rule is handled in a
// transaction holding its row (FOR UPDATE SKIP LOCKED), and the task's
// unique key refuses a second open task for the key.
type Freshness struct {
	cfg     FreshnessConfig
	db      *store.DB
	log     zerolog.Logger
	created *prometheus.CounterVec
	pauses  prometheus.Counter
}

// NewFreshness checks cfg and fills its defaults; it starts nothing.
func NewFreshness(cfg FreshnessConfig) (*Freshness, error) {
	if cfg.DB == nil || cfg.Hub == nil {
		return nil, errors.New("reactors: FreshnessConfig.DB and Hub are required")
	}
	if cfg.CatchUp <= 0 {
		cfg.CatchUp = 30 * time.Second
	}
	if cfg.MinGap <= 0 {
		cfg.MinGap = 50 * time.Millisecond
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	f := &Freshness{cfg: cfg, db: cfg.DB, log: cfg.Logger.With().Str("component", "freshness").Logger(),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_freshness_tasks_created_total",
			Help: "Tasks created by freshness rules on this instance, by priority.",
		}, []string{"priority"}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskservice_freshness_auto_pauses_total",
			Help: "Freshness rules paused because they no longer make valid tasks.",
		}),
	}
	if err := register(cfg.Registerer, "freshness", f.created, f.pauses); err != nil {
		return nil, err
	}
	return f, nil
}

// Run creates stale keys' tasks until ctx ends.
func (f *Freshness) Run(ctx context.Context) error {
	// A create, a claim or an unblocking moves no key's due time; a
	// completion does.
	wake, unsubscribe := f.cfg.Hub.SubscribeTo(store.Except(events.TaskCreated{}.EventType(), events.TaskClaimed{}.EventType(),
		events.TaskUnblocked{}.EventType(), store.TimedCreate))
	defer unsubscribe()
	timer := time.NewTimer(0)
	defer timer.Stop()
	ticker := time.NewTicker(f.cfg.CatchUp)
	defer ticker.Stop()
	var lastLook time.Time
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			if gap := time.Since(lastLook); gap < f.cfg.MinGap {
				rearm(timer, f.cfg.MinGap-gap)
				continue
			}
		case <-timer.C:
		case <-ticker.C:
		}
		next, err := f.Tick(ctx)
		lastLook = time.Now()
		if ctx.Err() != nil {
			return nil
		}
		now := f.db.Now()
		switch {
		case err != nil:
			f.log.Error().Err(err).Msg("creating stale keys' tasks failed; retrying soon")
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			rearm(timer, backoff)
		case next == nil:
			backoff = 0
		case !next.After(now):
			// Still due: another instance holds that rule now.
			backoff = min(max(2*backoff, 5*time.Millisecond), 500*time.Millisecond)
			rearm(timer, backoff)
		default:
			backoff = 0
			rearm(timer, next.Sub(now))
		}
	}
}

// Tick creates the tasks of every key due now and returns the next due
// time of any watched key (nil when none).
func (f *Freshness) Tick(ctx context.Context) (*time.Time, error) {
	next, err := f.db.NextFreshnessDue(ctx)
	if err != nil || next == nil || next.After(f.db.Now()) {
		return next, err
	}
	for {
		ds, err := f.db.CreateStaleTasks(ctx, f.cfg.BatchSize, f.cfg.Check)
		for _, d := range ds {
			if d.Paused {
				f.pauses.Inc()
				f.log.Warn().Str("rule_id", d.RuleID).Str("reason", d.Reason).Msg("freshness rule paused")
				continue
			}
			f.created.WithLabelValues(string(d.Priority)).Inc()
			f.log.Debug().Str("rule_id", d.RuleID).Str("task_id", d.TaskID).Str("reason", d.Reason).Msg("freshness task created")
		}
		if err != nil {
			return nil, err
		}
		if len(ds) < f.cfg.BatchSize {
			break
		}
	}
	return f.db.NextFreshnessDue(ctx)
}
