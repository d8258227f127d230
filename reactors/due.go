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

// DueTimerConfig configures a DueTimer.
type DueTimerConfig struct {
	DB  *store.DB
	Hub *store.Hub
	// CatchUp is the slow safety-net look, in case a wake was lost
	// (default 30 s).
	CatchUp time.Duration
	// MinGap is the least time between two looks that wakes cause (default
	// 20 ms): every commit wakes the hub, and a look costs a query.
	MinGap time.Duration
	// BatchSize is the most tasks one statement makes due (default 500).
	BatchSize int
	// Registerer receives the timer's metrics; none when nil.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// DueTimer wakes the claims when a held task's time comes (DESIGN §13).
// Each instance runs one, with one timer set for the earliest run_at of a
// scheduled task or the end of a full rate window (a limited type with
// tasks waiting regains room then); the timer is re-armed on every hub wake (a local commit,
// or another instance's NOTIFY: a task created or edited with a run_at) and
// on a slow catch-up tick. When it fires, the instance appends task.due to
// every task whose run_at came (one statement per batch, SKIP LOCKED, so
// two instances never wait for each other), and its commit wakes the
// long-polling claims here and, through NOTIFY, elsewhere. An instance whose
// timer found the tasks already taken by another wakes its own claims once
// that instance's commit is visible, without waiting for the NOTIFY.
type DueTimer struct {
	cfg     DueTimerConfig
	db      *store.DB
	log     zerolog.Logger
	metrics *dueMetrics
}

type dueMetrics struct {
	due   prometheus.Counter
	delay prometheus.Histogram
}

// NewDueTimer checks cfg and fills its defaults; it starts nothing.
func NewDueTimer(cfg DueTimerConfig) (*DueTimer, error) {
	if cfg.DB == nil || cfg.Hub == nil {
		return nil, errors.New("reactors: DueTimerConfig.DB and Hub are required")
	}
	if cfg.CatchUp <= 0 {
		cfg.CatchUp = 30 * time.Second
	}
	if cfg.MinGap <= 0 {
		cfg.MinGap = 20 * time.Millisecond
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	m := &dueMetrics{
		due: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskservice_tasks_due_total",
			Help: "Scheduled tasks this instance made claimable when their run_at came (task.due).",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskservice_task_due_delay_seconds",
			Help:    "From a scheduled task's run_at to the commit of its task.due, on this instance.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
		}),
	}
	if err := register(cfg.Registerer, "due timer", m.due, m.delay); err != nil {
		return nil, err
	}
	return &DueTimer{cfg: cfg, db: cfg.DB, log: cfg.Logger.With().Str("component", "due-timer").Logger(), metrics: m}, nil
}

// Run makes tasks due until ctx ends; it returns after the statement in hand.
func (d *DueTimer) Run(ctx context.Context) error {
	// Claims and completions never leave a task waiting for its run_at;
	// creates do when they name store.TimedCreate.
	wake, unsubscribe := d.cfg.Hub.SubscribeTo(store.Except(events.TaskClaimed{}.EventType(), events.TaskCompleted{}.EventType(),
		events.TaskCreated{}.EventType()))
	defer unsubscribe()
	timer := time.NewTimer(0) // look at once
	defer timer.Stop()
	ticker := time.NewTicker(d.cfg.CatchUp)
	defer ticker.Stop()
	var lastLook time.Time
	deadline := time.Now() // when the timer fires; zero when it is stopped
	// forDue: the timer is set for a time a task becomes due (a run_at, a
	// rate window's end), not for the end of a wake's gap. Only that time's
	// coming may wake others: a gap's end did, and this timer's own wake
	// then started the next gap, so every subscriber looked again every
	// MinGap, for ever.
	forDue := false
	arm := func(dur time.Duration, due bool) {
		rearm(timer, dur)
		deadline, forDue = time.Now().Add(dur), due
	}
	contended := time.Duration(0)
	for {
		fired := false
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			if gap := time.Since(lastLook); gap < d.cfg.MinGap {
				if wait := d.cfg.MinGap - gap; deadline.IsZero() || time.Now().Add(wait).Before(deadline) {
					arm(wait, false)
				}
				continue
			}
		case <-timer.C:
			fired = forDue
		case <-ticker.C:
		}
		deadline, forDue = time.Time{}, false
		made, next, err := d.Tick(ctx)
		lastLook = time.Now()
		if ctx.Err() != nil {
			return nil
		}
		if fired && made == 0 && err == nil {
			// The time came and another instance made the tasks due (or
			// they were edited), or a rate window ended: let this
			// instance's claims look now, without waiting for a NOTIFY.
			d.cfg.Hub.Wake()
		}
		now := d.db.Now()
		switch {
		case err != nil:
			d.log.Error().Err(err).Msg("making scheduled tasks due failed; retrying soon")
			contended = min(max(2*contended, 100*time.Millisecond), 5*time.Second)
			arm(contended, false)
		case next == nil:
			contended = 0
		case !next.After(now):
			// Still due: another instance holds those rows right now.
			// Look again shortly; its commit (or its death) frees them.
			contended = min(max(2*contended, 2*time.Millisecond), 500*time.Millisecond)
			arm(contended, true)
		default:
			contended = 0
			arm(next.Sub(now), true)
		}
	}
}

// Tick makes due every scheduled task whose run_at has come, batch after
// batch, and returns how many it made due and when to look next: the next
// run_at of a task still waiting (one already past means another instance
// holds it) or the next end of a full rate window, whichever comes first
// (nil when neither).
func (d *DueTimer) Tick(ctx context.Context) (int, *time.Time, error) {
	made := 0
	for {
		runAts, err := d.db.MakeDue(ctx, d.cfg.BatchSize)
		if err != nil {
			return made, nil, err
		}
		committed := d.db.Now()
		for _, at := range runAts {
			d.metrics.delay.Observe(max(committed.Sub(at).Seconds(), 0))
		}
		d.metrics.due.Add(float64(len(runAts)))
		made += len(runAts)
		if len(runAts) < d.cfg.BatchSize {
			break
		}
	}
	next, err := d.db.NextWakeAt(ctx)
	if err != nil {
		return made, nil, err
	}
	return made, next, nil
}
