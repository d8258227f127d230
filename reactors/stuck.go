package reactors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// StuckLease is the lease the stuck detector's instance holds.
const StuckLease = "stuck-detector"

// StuckConfig configures the stuck detector. Defaults are the seed design's.
type StuckConfig struct {
	DB *store.DB
	// InstanceID names this instance in the lease.
	InstanceID string
	// Tick is how often it looks (default 60 s).
	Tick time.Duration
	// OfflineAfter: a worker silent this long goes offline (default 10 min).
	OfflineAfter time.Duration
	// StuckAfter: a task in progress this long with a silent holder is
	// failed for retry (default 15 min).
	StuckAfter time.Duration
	// Limit bounds the rows one tick handles per rule (default 1000); the
	// rest wait for the next tick.
	Limit      int
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Stuck is the stuck detector (seed design §7a): a ticker that, on the one
// instance holding its lease, marks silent workers offline, gives the pending
// tasks pre-assigned to offline workers back to the pool (task.released with
// the reason), fails their tasks stuck in progress (kind worker_offline) and
// fails tasks past their type's timeout (kind timeout), each with its
// evidence. Every step re-decides on
// the current state, so a second run, or a second instance after a lease
// hand-over, changes nothing.
type Stuck struct {
	cfg     StuckConfig
	db      *store.DB
	log     zerolog.Logger
	actions *prometheus.CounterVec
}

// StuckReport says what one tick did.
type StuckReport struct {
	Leader      bool
	WentOffline int
	// ReleasedOffline: pending tasks pre-assigned to an offline worker,
	// given back to the pool.
	ReleasedOffline int
	FailedOffline   int
	FailedTimedOut  int
}

// NewStuck checks cfg and fills its defaults; it starts nothing.
func NewStuck(cfg StuckConfig) (*Stuck, error) {
	if cfg.DB == nil || cfg.InstanceID == "" {
		return nil, errors.New("reactors: StuckConfig.DB and InstanceID are required")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 60 * time.Second
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = 10 * time.Minute
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = 15 * time.Minute
	}
	if cfg.Limit <= 0 {
		cfg.Limit = 1000
	}
	s := &Stuck{cfg: cfg, db: cfg.DB, log: cfg.Logger.With().Str("component", StuckLease).Logger()}
	s.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskservice_stuck_detector_actions_total",
		Help: "Stuck detector actions: went_offline, released_offline (a pending task pre-assigned to an offline worker), failed_worker_offline, failed_timeout.",
	}, []string{"action"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.actions); err != nil {
			return nil, fmt.Errorf("reactors: register stuck metrics: %w", err)
		}
	}
	return s, nil
}

// Run ticks until ctx ends, then gives the lease up.
func (s *Stuck) Run(ctx context.Context) error {
	ticker := time.NewTicker(s.cfg.Tick)
	defer ticker.Stop()
	defer func() {
		_ = s.db.ReleaseLease(context.WithoutCancel(ctx), StuckLease, s.cfg.InstanceID)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		// A tick finishes what it started even when a stop arrives.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.Tick, time.Minute))
		rep, err := s.Tick(tctx)
		cancel()
		if err != nil {
			s.log.Error().Err(err).Msg("stuck detector tick failed")
		} else if rep.WentOffline+rep.ReleasedOffline+rep.FailedOffline+rep.FailedTimedOut > 0 {
			s.log.Info().Int("went_offline", rep.WentOffline).Int("released_offline", rep.ReleasedOffline).
				Int("failed_worker_offline", rep.FailedOffline).
				Int("failed_timeout", rep.FailedTimedOut).Msg("stuck detector acted")
		}
	}
}

// Tick runs the rules once, if this instance holds (or takes) the lease.
// The lease outlives two ticks, so the leader keeps it while it lives and
// another instance takes over within about two ticks after it dies.
func (s *Stuck) Tick(ctx context.Context) (StuckReport, error) {
	var rep StuckReport
	ok, err := s.db.AcquireLease(ctx, StuckLease, s.cfg.InstanceID, 2*s.cfg.Tick+5*time.Second)
	if err != nil || !ok {
		return rep, err
	}
	rep.Leader = true
	meta := events.Meta{Actor: events.System(StuckLease)}
	now := s.db.Now()

	workers, err := s.db.SilentWorkers(ctx, now.Add(-s.cfg.OfflineAfter), s.cfg.Limit)
	if err != nil {
		return rep, err
	}
	for _, w := range workers {
		did, err := s.db.MarkWorkerOffline(ctx, w.ID, s.cfg.OfflineAfter, meta)
		if err != nil {
			return rep, fmt.Errorf("mark worker %s offline: %w", w.ID, err)
		}
		if did {
			rep.WentOffline++
			s.actions.WithLabelValues("went_offline").Inc()
		}
	}

	// A task pre-assigned to an offline worker would wait for it forever.
	holders, err := s.db.OfflineHolders(ctx, now.Add(-s.cfg.OfflineAfter), s.cfg.Limit)
	if err != nil {
		return rep, err
	}
	for _, w := range holders {
		released, err := s.db.ReleaseFromOffline(ctx, w.ID, s.cfg.OfflineAfter, s.cfg.Limit, meta)
		if err != nil {
			return rep, fmt.Errorf("release the tasks of offline worker %s: %w", w.ID, err)
		}
		rep.ReleasedOffline += len(released)
		s.actions.WithLabelValues("released_offline").Add(float64(len(released)))
	}

	stuck, err := s.db.StuckTasks(ctx, now.Add(-s.cfg.StuckAfter), now.Add(-s.cfg.OfflineAfter), s.cfg.Limit)
	if err != nil {
		return rep, err
	}
	for _, t := range stuck {
		did, err := s.failTask(ctx, t.ID, "failed_worker_offline", store.SystemFailure{
			StartedAt: t.StartedAt, Kind: events.FailureWorkerOffline,
			Reason: fmt.Sprintf("Worker %s went offline", t.WorkerName),
			Update: fmt.Sprintf("Worker %s went offline. Task marked as failed for retry.", t.WorkerName),
		}, map[string]any{
			"last_heartbeat":            formatTime(t.LastHeartbeat),
			"offline_threshold_seconds": int(s.cfg.OfflineAfter / time.Second),
			"stuck_threshold_seconds":   int(s.cfg.StuckAfter / time.Second),
			"started_at":                t.StartedAt.Format(time.RFC3339Nano),
			"worker_id":                 t.WorkerID,
		}, meta)
		if err != nil {
			return rep, err
		}
		if did {
			rep.FailedOffline++
		}
	}

	timedOut, err := s.db.TimedOutTasks(ctx, s.cfg.Limit)
	if err != nil {
		return rep, err
	}
	for _, t := range timedOut {
		did, err := s.failTask(ctx, t.ID, "failed_timeout", store.SystemFailure{
			StartedAt: t.StartedAt, Kind: events.FailureTimeout,
			Reason: fmt.Sprintf("Task ran longer than its type's timeout of %d s", t.TimeoutSeconds),
			Update: fmt.Sprintf("Task exceeded its timeout of %d s. Task marked as failed for retry.", t.TimeoutSeconds),
		}, map[string]any{
			"started_at":      t.StartedAt.Format(time.RFC3339Nano),
			"timeout_seconds": t.TimeoutSeconds,
			"detected_at":     now.Format(time.RFC3339Nano),
			"worker_id":       t.WorkerID,
		}, meta)
		if err != nil {
			return rep, err
		}
		if did {
			rep.FailedTimedOut++
		}
	}
	return rep, nil
}

// failTask fails one task still in progress with the detector's evidence,
// and counts it under action (a label of the actions metric); false when
// the task had moved on already.
func (s *Stuck) failTask(ctx context.Context, id, action string, f store.SystemFailure, evidence map[string]any, meta events.Meta) (bool, error) {
	raw, err := json.Marshal(evidence)
	if err != nil {
		return false, err
	}
	f.Evidence = raw
	did, err := s.db.FailInProgress(ctx, id, f, meta)
	if err != nil {
		return false, fmt.Errorf("%s: task %s: %w", action, id, err)
	}
	if did {
		s.actions.WithLabelValues(action).Inc()
	}
	return did, nil
}

func formatTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}
