package reactors

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
)

// ScheduleHistoryConfig configures a ScheduleHistory pruner.
type ScheduleHistoryConfig struct {
	DB *store.DB
	// Limits: what each schedule keeps (days and runs, both at least 1).
	Limits store.HistoryLimits
	// Every is the time between two passes (default 10 minutes).
	Every  time.Duration
	Logger zerolog.Logger
}

// ScheduleHistory prunes every schedule's history to its limits at start
// and then every Every (store.PruneScheduleHistory). Every instance that
// runs the scheduler runs one; an advisory lock lets one pass at a time
// work, and every statement is a bounded batch of its own.
type ScheduleHistory struct {
	cfg ScheduleHistoryConfig
	log zerolog.Logger
}

// NewScheduleHistory checks cfg and fills its defaults; it starts nothing.
func NewScheduleHistory(cfg ScheduleHistoryConfig) (*ScheduleHistory, error) {
	if cfg.DB == nil {
		return nil, errors.New("reactors: ScheduleHistoryConfig.DB is required")
	}
	if cfg.Limits.Days < 1 || cfg.Limits.Runs < 1 {
		return nil, errors.New("reactors: schedule history days and runs must be at least 1")
	}
	if cfg.Every <= 0 {
		cfg.Every = 10 * time.Minute
	}
	return &ScheduleHistory{cfg: cfg, log: cfg.Logger.With().Str("worker", "schedule_history").Logger()}, nil
}

// Run prunes until ctx ends.
func (p *ScheduleHistory) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	for {
		rep, err := p.cfg.DB.PruneScheduleHistory(ctx, p.cfg.Limits)
		switch {
		case err != nil && ctx.Err() == nil:
			p.log.Warn().Err(err).Msg("cannot prune schedule history; will try again")
		case rep.Firings > 0:
			p.log.Info().Int64("firings_deleted", rep.Firings).Int("schedules", rep.Schedules).
				Int("days", p.cfg.Limits.Days).Int("runs", p.cfg.Limits.Runs).Msg("pruned schedule history")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
