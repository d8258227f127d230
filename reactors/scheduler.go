package reactors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	DB  *store.DB
	Hub *store.Hub
	// Check validates a template's params against its type's schema at
	// every firing (the API's validator); nil checks nothing beyond the type.
	Check store.ParamsCheck
	// CatchUp is the slow safety-net look at the schedules, in case a wake
	// was lost (default 30 s).
	CatchUp time.Duration
	// MinGap is the least time between two looks that wakes cause (default
	// 20 ms): every commit wakes the hub, and a look costs a query.
	MinGap time.Duration
	// BatchSize is the most schedules one firing transaction handles
	// (default 100).
	BatchSize int
	// Registerer receives the scheduler metrics; none when nil.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Scheduler fires due schedules (DESIGN §11). Each instance runs one, with
// one timer set for the earliest due time of any active schedule; the
// timer is re-armed on every hub wake (a local commit, or another
// instance's NOTIFY: schedules created, edited, resumed) and on a slow
// catch-up tick. Instances never coordinate by leases: a firing locks its
// schedule rows FOR UPDATE SKIP LOCKED, and a unique index on (schedule,
// due time) refuses a second firing of the same slot.
type Scheduler struct {
	cfg     SchedulerConfig
	db      *store.DB
	log     zerolog.Logger
	metrics *schedulerMetrics
}

type schedulerMetrics struct {
	firings *prometheus.CounterVec
	missed  prometheus.Counter
	delay   prometheus.Histogram
	looks   prometheus.Counter
	pauses  prometheus.Counter
}

// NewScheduler checks cfg and fills its defaults; it starts nothing.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.DB == nil || cfg.Hub == nil {
		return nil, errors.New("reactors: SchedulerConfig.DB and Hub are required")
	}
	if cfg.CatchUp <= 0 {
		cfg.CatchUp = 30 * time.Second
	}
	if cfg.MinGap <= 0 {
		cfg.MinGap = 20 * time.Millisecond
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	m := &schedulerMetrics{
		firings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_schedule_firings_total",
			Help: "Due schedule slots handled by this instance, by outcome: fired (task created), skipped (overlap), failed (template no longer valid).",
		}, []string{"outcome"}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskservice_schedule_missed_slots_total",
			Help: "Slots collapsed into a later firing after downtime (each firing fires once for all it missed).",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskservice_schedule_fire_delay_seconds",
			Help:    "From a slot's due time to the commit of its firing (task.created), on this instance.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60, 300},
		}),
		looks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskservice_scheduler_looks_total",
			Help: "Times this instance's scheduler looked for due schedules (timer, wake or catch-up).",
		}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskservice_schedule_auto_pauses_total",
			Help: "Schedules paused by the scheduler after consecutive failures.",
		}),
	}
	if err := register(cfg.Registerer, "scheduler", m.firings, m.missed, m.delay, m.looks, m.pauses); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, db: cfg.DB, log: cfg.Logger.With().Str("component", "scheduler").Logger(), metrics: m}, nil
}

// Run fires schedules until ctx ends; it returns after the firing in hand.
func (s *Scheduler) Run(ctx context.Context) error {
	// Only a schedule's own events move its next firing.
	wake, unsubscribe := s.cfg.Hub.SubscribeTo(func(t string) bool { return strings.HasPrefix(t, "schedule.") })
	defer unsubscribe()
	timer := time.NewTimer(0) // look at once
	defer timer.Stop()
	ticker := time.NewTicker(s.cfg.CatchUp)
	defer ticker.Stop()
	var lastLook time.Time
	deadline := time.Now() // when the timer fires; zero when it is stopped
	arm := func(d time.Duration) {
		rearm(timer, d)
		deadline = time.Now().Add(d)
	}
	contended := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			if gap := time.Since(lastLook); gap < s.cfg.MinGap {
				// Look once the gap is over, unless the timer fires sooner.
				if wait := s.cfg.MinGap - gap; deadline.IsZero() || time.Now().Add(wait).Before(deadline) {
					arm(wait)
				}
				continue
			}
		case <-timer.C:
		case <-ticker.C:
		}
		deadline = time.Time{}
		next, err := s.Tick(ctx)
		lastLook = time.Now()
		if ctx.Err() != nil {
			return nil
		}
		now := s.db.Now()
		switch {
		case err != nil:
			s.log.Error().Err(err).Msg("firing due schedules failed; retrying soon")
			contended = min(max(2*contended, 100*time.Millisecond), 5*time.Second)
			arm(contended)
		case next == nil:
			contended = 0 // nothing is due: wakes and the catch-up tick look again
		case !next.After(now):
			// Still due: another instance holds those rows right now. Look
			// again shortly; its commit (or its death) frees them.
			contended = min(max(2*contended, 5*time.Millisecond), 500*time.Millisecond)
			arm(contended)
		default:
			contended = 0
			arm(next.Sub(now))
		}
	}
}

// rearm sets t to fire once, after d.
func rearm(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(max(d, 0))
}

// Tick fires everything due now, batch after batch, and returns the next
// due time of any active schedule (nil when none).
func (s *Scheduler) Tick(ctx context.Context) (*time.Time, error) {
	s.metrics.looks.Inc()
	next, err := s.db.NextDue(ctx)
	if err != nil || next == nil || next.After(s.db.Now()) {
		return next, err
	}
	for {
		fired, err := s.db.FireDue(ctx, s.cfg.BatchSize, s.cfg.Check)
		s.record(fired) // committed, even when some schedule's firing failed
		if err != nil {
			return nil, err
		}
		if len(fired) < s.cfg.BatchSize {
			break
		}
	}
	return s.db.NextDue(ctx)
}

// record counts and logs the slots a FireDue handled.
func (s *Scheduler) record(fired []store.Firing) {
	committed := s.db.Now()
	for _, f := range fired {
		s.metrics.firings.WithLabelValues(f.Kind).Inc()
		s.metrics.missed.Add(float64(f.Missed))
		ev := s.log.Debug()
		switch f.Kind {
		case "fired":
			s.metrics.delay.Observe(committed.Sub(f.DueAt).Seconds())
		case "failed":
			ev = s.log.Warn().Str("reason", f.Reason)
		}
		if f.AutoPaused {
			s.metrics.pauses.Inc()
			ev = s.log.Warn().Str("reason", f.Reason).Bool("auto_paused", true)
		}
		ev.Str("schedule_id", f.ScheduleID).Str("outcome", f.Kind).Time("due_at", f.DueAt).
			Int("missed", f.Missed).Str("task_id", f.TaskID).Msg("schedule slot handled")
	}
}

// ScheduleFailuresReactorName keys the checkpoint of the reactor that
// pauses schedules whose executions keep failing.
const ScheduleFailuresReactorName = "schedule_failures"

// ScheduleFailures is the reactor that pauses a schedule after MaxFailures
// consecutive executions whose retry chains ended failed (retries
// exhausted or skipped), with those executions as evidence. The pause is
// decided on the schedule's locked row in the runner's transaction, so a
// replayed batch or a second instance pauses it once.
func ScheduleFailures(db *store.DB, log zerolog.Logger) Reactor {
	log = log.With().Str("reactor", ScheduleFailuresReactorName).Logger()
	return Reactor{
		Name:  ScheduleFailuresReactorName,
		Types: []string{events.TaskRetriesExhausted{}.EventType(), events.TaskRetrySkipped{}.EventType()},
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			for _, ev := range evs {
				t, err := db.GetTask(ctx, tx, ev.StreamID)
				if errors.Is(err, events.ErrNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if t.ScheduleID == nil {
					continue
				}
				paused, err := db.PauseFailingSchedule(ctx, tx, *t.ScheduleID, ev.Seq)
				if err != nil {
					return fmt.Errorf("schedule %s: %w", *t.ScheduleID, err)
				}
				if paused {
					log.Warn().Str("schedule_id", *t.ScheduleID).Str("task_id", t.ID).Msg("schedule paused: its executions keep failing")
				}
			}
			return nil
		},
	}
}
