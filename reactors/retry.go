package reactors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// RetryReactorName keys the checkpoint of the reactor that decides failures
// needing no advice (timeout, worker_offline); RetryAdviceReactorName that
// of the one that decides failures of kind error, asking the advisor first.
// Two reactors, each with its own place in the log, so that a slow advisor
// call never delays a retry that needs no advice.
const (
	RetryReactorName       = "retry"
	RetryAdviceReactorName = "retry_advice"
)

// RetryConfig configures the retry reactor.
type RetryConfig struct {
	DB *store.DB
	// Advisor, optional, advises on failures of kind error (Claude); nil
	// uses the template for every retry.
	Advisor Advisor
	// AdviceConcurrency bounds the advisor calls in flight (default 4).
	AdviceConcurrency int
	// InstanceID names this instance in the record of advice asked.
	InstanceID string
	// Registerer receives the advice counters; none when nil.
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Retry is the retry reactor: on task.failed it creates the retry task when
// the type allows more attempts (task.retried on the failed task), or
// records task.retries_exhausted, or task.retry_skipped when the advisor
// judged the failure permanent. Decisions are re-made on the task's current
// state inside the batch transaction, so a replayed batch, a manual retry
// that came first or a second instance changes nothing.
//
// Two phases, because the advisor call is a network call and must not run
// inside the transaction: Prepare (outside) asks the advisor about the
// batch's failures and keeps the answers by event seq; Handle (inside) uses
// them. An event Prepare did not advise on gets the template.
type Retry struct {
	cfg     RetryConfig
	db      *store.DB
	log     zerolog.Logger
	outcome *prometheus.CounterVec
	latency prometheus.Histogram

	mu     sync.Mutex
	advice map[int64]Advice // by task.failed seq, for the batch being handled
}

// NewRetry checks cfg and fills its defaults.
func NewRetry(cfg RetryConfig) (*Retry, error) {
	if cfg.DB == nil {
		return nil, errors.New("reactors: RetryConfig.DB is required")
	}
	if cfg.AdviceConcurrency <= 0 {
		cfg.AdviceConcurrency = 4
	}
	r := &Retry{cfg: cfg, db: cfg.DB, log: cfg.Logger.With().Str("reactor", RetryReactorName).Logger(),
		advice: map[int64]Advice{}}
	r.outcome = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "taskservice_retry_advice_total",
		Help: "Retry advisor (Claude) calls by outcome: hint, skip, error (the template was used).",
	}, []string{"outcome"})
	r.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "taskservice_retry_advice_duration_seconds",
		Help:    "Time of one retry advisor (Claude) call, whatever its outcome.",
		Buckets: []float64{.1, .25, .5, 1, 2, 4, 8, 15, 30},
	})
	if err := register(cfg.Registerer, "retry", r.outcome, r.latency); err != nil {
		return nil, err
	}
	return r, nil
}

// Reactors are the retry reactors for a Runner: one for failures of kind
// error (advised when there is an advisor), one for the other kinds. The
// split is by the event's kind alone, so every instance splits alike.
func (r *Retry) Reactors() []Reactor {
	failed := []string{events.TaskFailed{}.EventType()}
	plain := Reactor{Name: RetryReactorName, Types: failed,
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			return r.handle(ctx, tx, evs, false)
		}}
	advised := Reactor{Name: RetryAdviceReactorName, Types: failed,
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			return r.handle(ctx, tx, evs, true)
		}}
	if r.cfg.Advisor != nil {
		advised.Prepare = r.prepare
	}
	return []Reactor{plain, advised}
}

// isError says which of the two reactors decides a failure.
func isError(ev events.Envelope) bool {
	f, ok := ev.Payload.(events.TaskFailed)
	return ok && f.Kind == events.FailureError
}

// typeCache keeps the task types one batch has read.
type typeCache map[string]*events.TaskType

// candidate reads what deciding on a failure needs; nil when the failure is
// already decided (a replay, a manual retry first) and needs nothing.
func (r *Retry) candidate(ctx context.Context, q store.Querier, ev events.Envelope, types typeCache) (*events.Task, *events.TaskType, error) {
	t, err := r.db.GetTask(ctx, q, ev.StreamID)
	if errors.Is(err, events.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if t.Status != events.StatusFailed || t.RetryOutcome != nil {
		return nil, nil, nil
	}
	if tt, ok := types[t.TaskTypeID]; ok {
		return t, tt, nil
	}
	tt, err := r.db.GetTaskType(ctx, q, t.TaskTypeID)
	if err != nil {
		return nil, nil, err
	}
	types[t.TaskTypeID] = tt
	return t, tt, nil
}

// wantsAdvice: only errors are worth a call; worker_offline and timeout say
// everything already, and a task with no retry left gets none.
func wantsAdvice(ev events.Envelope, t *events.Task, tt *events.TaskType) bool {
	f, ok := ev.Payload.(events.TaskFailed)
	return ok && f.Kind == events.FailureError && t.RetryCount < tt.MaxRetries && !tt.Archived
}

// prepare asks the advisor about the batch's failures, outside any
// transaction, a few at a time. Each failure costs at most one call: answers
// already known here (a batch retried after an error) are kept, and a call
// is made only after ClaimAdvice recorded it, so neither another instance
// that prepares the same batch later (after a database restart ended this
// one's batch and its lease) nor this one after a crash asks again. A
// failure asked about elsewhere with no answer recorded gets the template.
func (r *Retry) prepare(ctx context.Context, evs []events.Envelope) error {
	r.mu.Lock()
	old := r.advice
	r.mu.Unlock()
	keep := make(map[int64]Advice, len(evs))
	jobs := map[int64]AdviceRequest{}
	var seqs []int64
	types := typeCache{}
	for _, ev := range evs {
		if !isError(ev) {
			continue
		}
		if a, ok := old[ev.Seq]; ok {
			keep[ev.Seq] = a
			continue
		}
		t, tt, err := r.candidate(ctx, r.db.Pool(), ev, types)
		if err != nil {
			return err
		}
		if t == nil || !wantsAdvice(ev, t, tt) {
			continue
		}
		reason := ""
		if t.FailureReason != nil {
			reason = *t.FailureReason
		}
		jobs[ev.Seq] = AdviceRequest{
			TaskTitle: t.Title, TaskType: tt.Name, Description: events.OriginalDescription(t.Description),
			Reason: reason, Attempt: t.RetryCount + 1, MaxAttempts: tt.MaxRetries + 1, TaskID: t.ID,
		}
		seqs = append(seqs, ev.Seq)
	}
	if len(seqs) == 0 {
		r.setAdvice(keep)
		return nil
	}
	mine, known, err := r.db.ClaimAdvice(ctx, seqs, r.cfg.InstanceID)
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		if a, ok := known[seq]; ok {
			if !a.Answered {
				r.log.Info().Int64("event_seq", seq).Msg("retry advice was asked before and never answered; using the template")
			}
			keep[seq] = Advice{Skip: a.Skip, Reason: a.Reason, Hint: a.Hint}
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.cfg.AdviceConcurrency)
	for _, seq := range mine {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a := r.ask(ctx, seq, jobs[seq])
			mu.Lock()
			keep[seq] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	r.setAdvice(keep)
	return nil
}

// ask makes one advisor call and records its answer; an error is the
// template (an empty Advice), recorded too.
func (r *Retry) ask(ctx context.Context, seq int64, req AdviceRequest) Advice {
	start := time.Now()
	a, err := r.cfg.Advisor.Advise(ctx, req)
	r.latency.Observe(time.Since(start).Seconds())
	if a.Usage != nil && req.TaskID != "" {
		// Once: only the instance whose ClaimAdvice won the failure calls.
		if uerr := r.db.RecordAdvisorUsage(context.WithoutCancel(ctx), r.db.Pool(), req.TaskID, *a.Usage); uerr != nil {
			r.log.Warn().Err(uerr).Int64("event_seq", seq).Msg("cannot record the retry advisor's LLM usage")
		}
	}
	switch {
	case err != nil:
		r.log.Warn().Err(err).Int64("event_seq", seq).Msg("retry advice failed; using the template")
		r.outcome.WithLabelValues("error").Inc()
		a = Advice{}
	case a.Skip:
		r.outcome.WithLabelValues("skip").Inc()
	default:
		r.outcome.WithLabelValues("hint").Inc()
	}
	stored := store.StoredAdvice{Seq: seq, Answered: true, Skip: a.Skip, Reason: a.Reason, Hint: a.Hint}
	if err := r.db.SaveAdvice(context.WithoutCancel(ctx), stored); err != nil {
		// Kept in memory for this instance's next try of the batch.
		r.log.Warn().Err(err).Int64("event_seq", seq).Msg("cannot record the retry advice")
	}
	return a
}

func (r *Retry) setAdvice(a map[int64]Advice) {
	r.mu.Lock()
	r.advice = a
	r.mu.Unlock()
}

func (r *Retry) adviceFor(seq int64) Advice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.advice[seq]
}

// handle decides the batch's failures of kind error (errors true) or of the
// other kinds inside the runner's transaction, and drops the advice records
// of the failures it decided.
func (r *Retry) handle(ctx context.Context, tx pgx.Tx, evs []events.Envelope, kindError bool) error {
	types := typeCache{}
	var decided []int64
	for _, ev := range evs {
		if isError(ev) != kindError {
			continue
		}
		if err := r.decide(ctx, tx, ev, types); err != nil {
			return fmt.Errorf("event %d (task %s): %w", ev.Seq, ev.StreamID, err)
		}
		decided = append(decided, ev.Seq)
	}
	if !kindError {
		return nil
	}
	return r.db.ForgetAdvice(ctx, tx, decided)
}

func (r *Retry) decide(ctx context.Context, tx pgx.Tx, ev events.Envelope, types typeCache) error {
	t, tt, err := r.candidate(ctx, tx, ev, types)
	if err != nil || t == nil {
		return err
	}
	root, err := r.db.RootOf(ctx, tx, t)
	if err != nil {
		return err
	}
	meta := events.Meta{Actor: events.System(RetryReactorName), CausationSeq: ev.Seq, CorrelationID: root}
	var decision store.TaskDecision
	switch advice := r.adviceFor(ev.Seq); {
	case t.RetryCount >= tt.MaxRetries:
		decision = func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(tt.MaxRetries) }
	case tt.Archived:
		reason := fmt.Sprintf("Task type %s is archived: no new tasks of it.", tt.Name)
		decision = func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped(reason) }
	case advice.Skip && wantsAdvice(ev, t, tt):
		decision = func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped(advice.Reason) }
	default:
		// Checked on this very state before writing: CreateRetry's errors
		// after that mean a concurrent change, which a retried batch sees.
		if _, err := t.Retried(events.TaskRetried{}); err != nil {
			r.log.Info().Err(err).Str("task_id", t.ID).Msg("not retrying")
			return nil
		}
		hint := ""
		if wantsAdvice(ev, t, tt) {
			hint = advice.Hint
		}
		retry, err := r.db.CreateRetryOf(ctx, tx, t, tt, store.RetryParams{Hint: hint, Meta: meta})
		var dup *events.DuplicateTaskError
		if errors.As(err, &dup) {
			reason := fmt.Sprintf("Task %s holds the unique key %q: no retry while it is pending or in progress.", dup.TaskID, dup.UniqueKey)
			_, _, err = r.db.UpdateTask(ctx, tx, t.ID, meta, func(t *events.Task) ([]events.Payload, error) { return t.RetrySkipped(reason) })
			return err
		}
		if err != nil {
			return err
		}
		r.log.Debug().Str("task_id", t.ID).Str("retry_id", retry.ID).Int("retry", retry.RetryCount).Msg("retry created")
		return nil
	}
	_, _, err = r.db.UpdateTask(ctx, tx, t.ID, meta, decision)
	if errors.Is(err, events.ErrInvalidTransition) {
		// Decided meanwhile (an admin's manual retry): nothing was written.
		r.log.Info().Err(err).Str("task_id", t.ID).Msg("retry already decided")
		return nil
	}
	return err
}
