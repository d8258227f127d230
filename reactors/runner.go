package reactors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Reactor is a named consumer of some event types.
type Reactor struct {
	// Name keys the checkpoint row; never rename a reactor that has run.
	Name string
	// Types are the event types it reads; empty reads every event.
	Types []string
	// Handle applies the effects of a batch inside tx, the transaction that
	// also advances the checkpoint. An error rolls both back and the batch
	// is retried after a backoff, so Handle returns errors only for what a
	// retry can fix (the database); a domain refusal is logged and skipped.
	// No network calls here.
	Handle func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error
	// Prepare, optional, runs before the transaction on exactly the events
	// the next Handle gets, for work that needs the network (the retry
	// reactor's Claude call). While it runs, this instance holds a lease on
	// the reactor so other instances do not prepare the same batch.
	Prepare func(ctx context.Context, evs []events.Envelope) error
	// Dormant, when its events need nothing done now (Telegram's reactor
	// with notifications off): Handle is not called, and the runner moves
	// its checkpoint to the log's head instead of reading the events.
	// Commits do not wake it: it moves at start, on the catch-up ticker and
	// once more as the runner stops, so its checkpoint stays near the
	// log's end without a look per commit (ADR 037).
	Dormant bool
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	DB  *store.DB
	Hub *store.Hub
	// InstanceID names this instance in leases.
	InstanceID string
	Reactors   []Reactor
	// BatchSize is the most events one batch reads (default 100).
	BatchSize int
	// CatchUp is the slow ticker that re-reads even without a wake, so a
	// lost NOTIFY costs latency, never data (default 5 s). The lag gauges
	// are refreshed on it too.
	CatchUp time.Duration
	// PrepareTimeout bounds a Prepare and is the lease it holds (default 2 min).
	PrepareTimeout time.Duration
	// BatchTimeout bounds one batch's transaction (default 1 min).
	BatchTimeout time.Duration
	// MinInterval paces the looks at the log that wakes cause (default
	// 5 ms): a burst of up to 4 looks goes at once, a storm of commits
	// costs at most one look per interval.
	MinInterval time.Duration
	// Registerer receives the reactor metrics; none when nil.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Runner runs reactors until its context ends.
type Runner struct {
	cfg     RunnerConfig
	db      *store.DB
	metrics *runnerMetrics
}

// NewRunner checks cfg and fills its defaults; it starts nothing.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.DB == nil || cfg.Hub == nil {
		return nil, errors.New("reactors: RunnerConfig.DB and Hub are required")
	}
	if cfg.InstanceID == "" {
		return nil, errors.New("reactors: RunnerConfig.InstanceID is required")
	}
	seen := map[string]bool{}
	for _, r := range cfg.Reactors {
		if r.Name == "" || r.Handle == nil {
			return nil, fmt.Errorf("reactors: reactor %q needs a name and a Handle", r.Name)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("reactors: two reactors named %q", r.Name)
		}
		seen[r.Name] = true
		for _, t := range r.Types {
			if !events.KnownType(t) {
				return nil, fmt.Errorf("reactors: reactor %q wants unknown event type %q", r.Name, t)
			}
		}
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.CatchUp <= 0 {
		cfg.CatchUp = 5 * time.Second
	}
	if cfg.PrepareTimeout <= 0 {
		cfg.PrepareTimeout = 2 * time.Minute
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = time.Minute
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = 5 * time.Millisecond
	}
	m, err := newRunnerMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, db: cfg.DB, metrics: m}, nil
}

// Run runs every reactor until ctx ends, then returns once each has finished
// the batch it was in.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, re := range r.cfg.Reactors {
		wg.Go(func() { r.loop(ctx, re) })
	}
	wg.Go(func() { r.lagLoop(ctx) })
	wg.Wait()
	return nil
}

// loop is one reactor's life: drain on every wake, tick and retry timer.
func (r *Runner) loop(ctx context.Context, re Reactor) {
	log := r.cfg.Logger.With().Str("reactor", re.Name).Logger()
	var wants func(string) bool
	if len(re.Types) > 0 {
		wants = func(t string) bool { return slices.Contains(re.Types, t) }
	}
	var wake <-chan struct{} // nil for a dormant reactor: never ready
	if !re.Dormant {
		ch, unsubscribe := r.cfg.Hub.SubscribeTo(wants)
		defer unsubscribe()
		wake = ch
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(backoff*2, 30*time.Second) {
		err := r.db.EnsureCheckpoint(ctx, re.Name, re.Types)
		if err == nil {
			break
		}
		log.Warn().Err(err).Msg("cannot create the checkpoint; retrying")
		if !sleep(ctx, backoff) {
			return
		}
	}
	ticker := time.NewTicker(r.cfg.CatchUp)
	defer ticker.Stop()
	soon := time.NewTimer(0) // the first drain happens at once
	defer soon.Stop()
	errBackoff := time.Duration(0)
	hiddenBackoff := time.Duration(0)
	pace := newPacer(r.cfg.MinInterval, lookBurst)
	for {
		select {
		case <-ctx.Done():
			if re.Dormant {
				r.lastDrain(ctx, re, log)
			}
			return
		case <-wake:
		case <-ticker.C:
		case <-soon.C:
		}
		if wait := pace.take(time.Now()); wait > 0 && !sleep(ctx, wait) {
			return
		}
		hidden, err := r.drain(ctx, re)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			errBackoff = min(max(2*errBackoff, 100*time.Millisecond), 30*time.Second)
			log.Error().Err(err).Dur("retry_in", errBackoff).Msg("batch failed; it will be retried")
			// A wake must not cut the backoff short: wait it out.
			if !sleep(ctx, errBackoff) {
				return
			}
			soon.Reset(0)
		case hidden && hiddenBackoff < maxHiddenBackoff:
			// Events exist that an older transaction still hides, and its
			// end may wake nobody (a heartbeat, another database's write):
			// look again a few times, 2 ms to 256 ms apart, then leave it to
			// the next wake or the catch-up ticker.
			errBackoff = 0
			hiddenBackoff = max(2*hiddenBackoff, 2*time.Millisecond)
			soon.Reset(hiddenBackoff)
		case !hidden:
			errBackoff, hiddenBackoff = 0, 0
		}
	}
}

// lastDrain catches a dormant reactor up once more as the runner stops,
// within a bound of its own, so a restart that wakes it up (notifications
// turned on) starts from about where this instance stopped.
func (r *Runner) lastDrain(ctx context.Context, re Reactor, log zerolog.Logger) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastDrainTimeout)
	defer cancel()
	if _, err := r.drain(dctx, re); err != nil {
		log.Warn().Err(err).Msg("the last catch-up at stop failed")
	}
}

// lastDrainTimeout bounds lastDrain: a stop is not held up for long.
const lastDrainTimeout = 2 * time.Second

// lookBurst is how many looks may follow each other without pacing: the
// few commits of one request or one small burst are served at once.
const lookBurst = 4

// pacer is a token bucket: up to burst looks at once, refilled one per
// interval.
type pacer struct {
	interval time.Duration
	burst    float64
	tokens   float64
	last     time.Time
}

func newPacer(interval time.Duration, burst int) *pacer {
	return &pacer{interval: interval, burst: float64(burst), tokens: float64(burst)}
}

// take spends a token and says how long to wait for it first.
func (p *pacer) take(now time.Time) time.Duration {
	if !p.last.IsZero() {
		p.tokens = min(p.burst, p.tokens+float64(now.Sub(p.last))/float64(p.interval))
	}
	p.last = now
	p.tokens--
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens * float64(p.interval))
}

// maxHiddenBackoff ends the quick re-reads after a wake found hidden events.
const maxHiddenBackoff = 256 * time.Millisecond

// drain runs batches while there is visible work and ctx lasts. hidden
// reports events the horizon still hides.
func (r *Runner) drain(ctx context.Context, re Reactor) (hidden bool, err error) {
	for ctx.Err() == nil {
		work, err := r.db.Pending(ctx, re.Name, re.Types)
		if err != nil || !work.Visible {
			return work.Hidden, err
		}
		if work.Checkpoint.Leased(r.cfg.InstanceID, r.db.Now()) {
			return false, nil // another instance prepares a batch; its commit wakes us
		}
		batch := r.batch
		if re.Dormant {
			batch = r.skip
		}
		res, err := batch(ctx, re)
		r.metrics.batches.WithLabelValues(re.Name, res.String()).Inc()
		if err != nil {
			return false, err
		}
		if res == batchSkipped || res == batchEmpty {
			// Another instance works this reactor now, or it moved on
			// between the look and the batch: the next wake or tick looks again.
			return false, nil
		}
	}
	return false, nil
}

type batchResult int

const (
	batchDone batchResult = iota
	batchEmpty
	batchSkipped
	batchFailed
)

func (b batchResult) String() string {
	return [...]string{"done", "empty", "skipped", "failed"}[b]
}

// errRollback ends a transaction that must not commit (nothing to do, or
// another instance's turn) without being an error.
var errRollback = errors.New("rollback")

// batch runs one batch. It survives ctx's cancellation: a stop takes effect
// between batches, never inside one.
func (r *Runner) batch(ctx context.Context, re Reactor) (batchResult, error) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.BatchTimeout+r.cfg.PrepareTimeout)
	defer cancel()
	limit := r.cfg.BatchSize
	var prepared *preparedBatch
	if re.Prepare != nil {
		p, res, err := r.prepare(bctx, re)
		if p == nil {
			return res, err
		}
		prepared, limit = p, len(p.evs)
	}
	res := batchDone
	start := time.Now()
	var handled []events.Envelope
	tctx, cancelTx := context.WithTimeout(bctx, r.cfg.BatchTimeout)
	defer cancelTx()
	err := r.db.WithTx(tctx, func(tx pgx.Tx) error {
		cp, err := r.lockCheckpoint(tctx, tx, re.Name)
		if errors.Is(err, errRollback) {
			res = batchSkipped
		}
		if err != nil {
			return err
		}
		if prepared != nil && cp.Position != prepared.from {
			// Our lease ran out and another instance moved on: prepare again.
			res = batchSkipped
			return errRollback
		}
		evs, err := r.db.ReadLog(tctx, tx, cp.Position, limit, store.LogFilter{Types: re.Types})
		if err != nil {
			return err
		}
		if prepared != nil {
			evs = upTo(evs, prepared.last)
		}
		if len(evs) == 0 {
			res = batchEmpty
			return errRollback
		}
		if err := re.Handle(tctx, tx, evs); err != nil {
			return fmt.Errorf("reactor %s: %w", re.Name, err)
		}
		handled = evs
		return r.db.SaveCheckpoint(tctx, tx, re.Name, evs[len(evs)-1].Position())
	})
	if err != nil && prepared != nil {
		// SaveCheckpoint ends the lease on success; end it here otherwise.
		_ = r.db.ReleaseCheckpointLease(context.WithoutCancel(ctx), re.Name, r.cfg.InstanceID)
	}
	if errors.Is(err, errRollback) {
		return res, nil
	}
	if err != nil {
		return batchFailed, err
	}
	r.metrics.events.WithLabelValues(re.Name).Add(float64(len(handled)))
	r.metrics.duration.WithLabelValues(re.Name).Observe(time.Since(start).Seconds())
	return batchDone, nil
}

// lockCheckpoint locks a reactor's checkpoint in tx; errRollback when it is
// missing or another instance's lease holds it (the batch is skipped).
func (r *Runner) lockCheckpoint(ctx context.Context, tx pgx.Tx, name string) (store.Checkpoint, error) {
	cp, ok, err := r.db.LockCheckpoint(ctx, tx, name)
	if err != nil {
		return cp, err
	}
	if !ok || cp.Leased(r.cfg.InstanceID, r.db.Now()) {
		return cp, errRollback
	}
	return cp, nil
}

// skip moves a dormant reactor's checkpoint to the log's head, past events
// it has nothing to do with, without reading them: one read of the head
// however many there are.
func (r *Runner) skip(ctx context.Context, re Reactor) (batchResult, error) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.BatchTimeout)
	defer cancel()
	res := batchDone
	err := r.db.WithTx(tctx, func(tx pgx.Tx) error {
		cp, err := r.lockCheckpoint(tctx, tx, re.Name)
		if errors.Is(err, errRollback) {
			res = batchSkipped
		}
		if err != nil {
			return err
		}
		head, err := r.db.LogHead(tctx, tx)
		if err != nil {
			return err
		}
		if !cp.Position.Less(head) {
			res = batchEmpty
			return errRollback
		}
		return r.db.SaveCheckpoint(tctx, tx, re.Name, head)
	})
	if errors.Is(err, errRollback) {
		return res, nil
	}
	if err != nil {
		return batchFailed, err
	}
	return batchDone, nil
}

// preparedBatch is what Prepare saw: the batch the transaction must handle.
type preparedBatch struct {
	from events.Position
	last events.Position
	evs  []events.Envelope
}

// prepare leases the reactor, reads its next batch outside any transaction
// and runs Prepare on it. A nil batch means there is nothing to handle now.
func (r *Runner) prepare(ctx context.Context, re Reactor) (*preparedBatch, batchResult, error) {
	until := r.db.Now().Add(r.cfg.PrepareTimeout + r.cfg.BatchTimeout)
	from, ok, err := r.db.LeaseCheckpoint(ctx, re.Name, r.cfg.InstanceID, until)
	if err != nil || !ok {
		return nil, batchSkipped, err
	}
	release := func() { _ = r.db.ReleaseCheckpointLease(context.WithoutCancel(ctx), re.Name, r.cfg.InstanceID) }
	evs, err := r.db.ReadLog(ctx, r.db.Pool(), from, r.cfg.BatchSize, store.LogFilter{Types: re.Types})
	if err != nil || len(evs) == 0 {
		release()
		return nil, batchEmpty, err
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PrepareTimeout)
	defer cancel()
	if err := re.Prepare(pctx, evs); err != nil {
		release()
		return nil, batchFailed, fmt.Errorf("reactor %s: prepare: %w", re.Name, err)
	}
	return &preparedBatch{from: from, last: evs[len(evs)-1].Position(), evs: evs}, batchDone, nil
}

// upTo keeps the events at or before last. Below the horizon the log never
// changes, so a re-read from the same position returns what Prepare saw.
func upTo(evs []events.Envelope, last events.Position) []events.Envelope {
	for i, e := range evs {
		if last.Less(e.Position()) {
			return evs[:i]
		}
	}
	return evs
}

// lagLoop refreshes the lag gauges on the catch-up ticker.
func (r *Runner) lagLoop(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.CatchUp)
	defer ticker.Stop()
	for {
		lags, err := r.db.ReactorLags(ctx)
		if err == nil {
			for _, l := range lags {
				r.metrics.lagEvents.WithLabelValues(l.Name).Set(float64(l.EventsBehind))
				r.metrics.lagSeconds.WithLabelValues(l.Name).Set(l.SecondsBehind)
			}
		} else if ctx.Err() == nil {
			r.cfg.Logger.Warn().Err(err).Msg("cannot measure reactor lag")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

type runnerMetrics struct {
	batches    *prometheus.CounterVec
	events     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	lagEvents  *prometheus.GaugeVec
	lagSeconds *prometheus.GaugeVec
}

func newRunnerMetrics(reg prometheus.Registerer) (*runnerMetrics, error) {
	m := &runnerMetrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_reactor_batches_total",
			Help: "Reactor batches by outcome: done, empty, skipped (another instance has it), failed.",
		}, []string{"reactor", "outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_reactor_events_total", Help: "Events handled by reactors on this instance.",
		}, []string{"reactor"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "taskservice_reactor_batch_duration_seconds", Help: "Time of one committed reactor batch.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}, []string{"reactor"}),
		lagEvents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_reactor_lag_events",
			Help: "Visible events of a reactor's types after its checkpoint (capped at 100000).",
		}, []string{"reactor"}),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "taskservice_reactor_lag_seconds",
			Help: "Age of the oldest visible event a reactor has not handled; 0 when caught up.",
		}, []string{"reactor"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batches, m.events, m.duration, m.lagEvents, m.lagSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("reactors: register metrics: %w", err)
		}
	}
	return m, nil
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
