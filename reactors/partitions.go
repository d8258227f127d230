package reactors

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
)

// PartitionsConfig configures a Partitions maintainer.
type PartitionsConfig struct {
	DB     *store.DB
	Policy store.PartitionPolicy
	// Every is the time between two passes (default 1 hour: partitions
	// exist Policy.Ahead periods ahead, so a missed pass costs nothing).
	Every time.Duration
	// Retry is how soon a pass follows a failed one (a lock it gave up
	// waiting for, behind autovacuum or a long reader), doubling up to
	// Every (default 10 s): events left in the default partition would
	// otherwise wait there for a whole Every.
	Retry      time.Duration
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Partitions keeps task_events' partitions (store.MaintainPartitions) at
// start and then every Every. Every instance runs one; an advisory lock
// lets one pass at a time work.
type Partitions struct {
	cfg   PartitionsConfig
	log   zerolog.Logger
	count prometheus.Gauge
	moved prometheus.Counter
}

// NewPartitions checks cfg and fills its defaults; it starts nothing.
func NewPartitions(cfg PartitionsConfig) (*Partitions, error) {
	if cfg.DB == nil {
		return nil, errors.New("reactors: PartitionsConfig.DB is required")
	}
	if _, err := archive.ParseKind(cfg.Policy.Kind); err != nil {
		return nil, err
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Hour
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 10 * time.Second
	}
	p := &Partitions{cfg: cfg, log: cfg.Logger.With().Str("worker", "partitions").Logger(),
		count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskservice_event_partitions",
			Help: "Partitions of task_events after this instance's last maintenance pass, the default one included."}),
		moved: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskservice_event_partition_default_moved_total",
			Help: "Events this instance's maintenance moved from task_events_default into their period's new partition."}),
	}
	if err := register(cfg.Registerer, "partitions", p.count, p.moved); err != nil {
		return nil, err
	}
	return p, nil
}

// Run maintains until ctx ends.
func (p *Partitions) Run(ctx context.Context) error {
	retry := p.cfg.Retry
	for {
		next := p.cfg.Every
		rep, err := p.cfg.DB.MaintainPartitions(ctx, p.cfg.Policy)
		switch {
		case err != nil && ctx.Err() == nil:
			next, retry = min(retry, p.cfg.Every), min(2*retry, p.cfg.Every)
			p.log.Warn().Err(err).Dur("again_in", next).Msg("cannot maintain the event log's partitions; will try again")
		case err != nil || rep.Skipped:
		default:
			retry = p.cfg.Retry
			p.count.Set(float64(rep.Partitions))
			p.moved.Add(float64(rep.Moved))
			if len(rep.Created)+len(rep.Dropped)+len(rep.Merged) > 0 {
				p.log.Info().Strs("created", rep.Created).Strs("dropped", rep.Dropped).Strs("merged", rep.Merged).
					Int64("moved_from_default", rep.Moved).Int("partitions", rep.Partitions).Msg("maintained the event log's partitions")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}
