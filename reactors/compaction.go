package reactors

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
)

// CompactionConfig configures a Compaction worker.
type CompactionConfig struct {
	DB    *store.DB
	Store blob.Store
	// Retention: past it, finished chains are compacted (at least a day).
	Retention time.Duration
	// Period: the archive's period kind (day or week).
	Period string
	// Every is the time between two rounds (default 10 minutes).
	Every time.Duration
	// Batch is the chains of one transaction; Pause is slept after each.
	Batch int
	Pause time.Duration
	// Share is the most of its time a pass spends in transactions.
	Share float64
	// Now is the clock (default the store's).
	Now        func() time.Time
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Compaction archives the log's ended periods and then compacts the
// finished chains past the retention (ADR 035), at start and every Every.
// Every instance runs one; advisory locks let one archive and one compact
// at a time, so an archive object is written once (on S3 as on the
// filesystem a second write would replace it).
type Compaction struct {
	cfg     CompactionConfig
	log     zerolog.Logger
	tasks   prometheus.Counter
	deleted prometheus.Counter
	periods prometheus.Counter
	supps   prometheus.Counter
	bytes   prometheus.Counter
	rounds  *prometheus.CounterVec
}

// NewCompaction checks cfg and fills its defaults; it starts nothing.
func NewCompaction(cfg CompactionConfig) (*Compaction, error) {
	if cfg.DB == nil || cfg.Store == nil {
		return nil, errors.New("reactors: CompactionConfig needs DB and Store")
	}
	if cfg.Retention < store.MinRetention {
		return nil, errors.New("reactors: the event retention must be at least a day")
	}
	if _, err := archive.ParseKind(cfg.Period); err != nil {
		return nil, err
	}
	if cfg.Every <= 0 {
		cfg.Every = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = cfg.DB.Now
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = store.DefaultCompactionShare // the archive's rest too
	}
	c := &Compaction{cfg: cfg, log: cfg.Logger.With().Str("worker", "compaction").Logger(),
		tasks: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_compaction_tasks_total",
			Help: "Tasks whose events this instance replaced by one task.compacted event."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_compaction_events_deleted_total",
			Help: "Events this instance's compaction deleted (each in a verified archive)."}),
		periods: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_archive_periods_total",
			Help: "Periods of the event log this instance archived."}),
		supps: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_archive_supplements_total",
			Help: "Supplementary archive objects this instance wrote: events that committed after their period was archived."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_archive_bytes_total",
			Help: "Bytes of archive objects (gzipped JSON lines) this instance wrote."}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskservice_compaction_rounds_total",
			Help: "Compaction rounds: done, skipped (another instance held the lock) or failed."}, []string{"outcome"}),
	}
	if err := register(cfg.Registerer, "compaction", c.tasks, c.deleted, c.periods, c.supps, c.bytes, c.rounds); err != nil {
		return nil, err
	}
	return c, nil
}

// Run archives and compacts until ctx ends.
func (c *Compaction) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Every)
	defer t.Stop()
	for {
		outcome := "done"
		if err := c.Round(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			outcome = "failed"
			c.log.Warn().Err(err).Msg("compaction round failed; it runs again later")
		}
		c.rounds.WithLabelValues(outcome).Inc()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Round archives every ended period that holds events before the
// retention's start, then compacts until the pass reaches it.
func (c *Compaction) Round(ctx context.Context) error {
	cutoff := c.cfg.Now().Add(-c.cfg.Retention)
	pool := c.cfg.DB.Pool().Pool
	arep, err := archive.Run(ctx, archive.Config{Pool: pool, Store: c.cfg.Store, Kind: c.cfg.Period,
		Before: archive.PeriodOf(c.cfg.Period, cutoff).End(), Now: c.cfg.Now, Share: c.cfg.Share})
	c.periods.Add(float64(arep.Periods))
	c.supps.Add(float64(arep.Supplements))
	c.bytes.Add(float64(arep.Bytes))
	if arep.Periods > 0 || arep.Supplements > 0 {
		c.log.Info().Int("periods", arep.Periods).Int("supplements", arep.Supplements).Int64("events", arep.Events).
			Int64("bytes", arep.Bytes).Str("period", c.cfg.Period).Msg("archived the event log's periods")
	}
	if err != nil {
		return err
	}
	for {
		start := time.Now()
		rep, err := c.cfg.DB.Compact(ctx, store.CompactConfig{Retention: c.cfg.Retention, Period: c.cfg.Period,
			Batch: c.cfg.Batch, Pause: c.cfg.Pause, Share: c.cfg.Share})
		c.tasks.Add(float64(rep.Tasks))
		c.deleted.Add(float64(rep.Events))
		if rep.Tasks > 0 || rep.Looked > 0 {
			c.log.Info().Int64("chains", rep.Chains).Int64("tasks", rep.Tasks).Int64("events_deleted", rep.Events).
				Int64("looked", rep.Looked).Interface("left", rep.Left).Bool("done", rep.Done).
				Dur("took", time.Since(start)).Msg("compacted finished chains past the retention")
		}
		if err != nil {
			return err
		}
		if rep.Skipped {
			c.rounds.WithLabelValues("skipped").Inc()
			return nil
		}
		if rep.Done || ctx.Err() != nil {
			return nil
		}
	}
}
