package reactors

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// RetryReactorName keys the retry reactor's checkpoint.
const RetryReactorName = "retry"

// RetryConfig configures the retry reactor.
type RetryConfig struct {
	DB *store.DB
	// Advisor, optional, advises on failures of kind error (Claude); nil
	// uses the template for every retry.
	Advisor Advisor
	// AdviceConcurrency bounds the advisor calls in flight (default 4).
	AdviceConcurrency int
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
		Help: "Retry advisor calls by outcome: hint, skip, error (the template was used).",
	}, []string{"outcome"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.outcome); err != nil {
			return nil, fmt.Errorf("reactors: register retry metrics: %w", err)
		}
	}
	return r, nil
}

// Reactor is the retry reactor for a Runner.
func (r *Retry) Reactor() Reactor {
	re := Reactor{Name: RetryReactorName, Types: []string{events.TaskFailed{}.EventType()}, Handle: r.handle}
	if r.cfg.Advisor != nil {
		re.Prepare = r.prepare
	}
	return re
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
// transaction, a few at a time. Answers already known (a batch retried after
// an error) are kept, so the advisor is asked once per failure.
func (r *Retry) prepare(ctx context.Context, evs []events.Envelope) error {
	r.mu.Lock()
	old := r.advice
	r.mu.Unlock()
	keep := make(map[int64]Advice, len(evs))
	type job struct {
		seq int64
		req AdviceRequest
	}
	var jobs []job
	types := typeCache{}
	for _, ev := range evs {
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
		jobs = append(jobs, job{ev.Seq, AdviceRequest{
			TaskTitle: t.Title, TaskType: tt.Name, Description: events.OriginalDescription(t.Description),
			Reason: reason, Attempt: t.RetryCount + 1, MaxAttempts: tt.MaxRetries + 1,
		}})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.cfg.AdviceConcurrency)
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a, err := r.cfg.Advisor.Advise(ctx, j.req)
			switch {
			case err != nil:
				r.log.Warn().Err(err).Int64("event_seq", j.seq).Msg("retry advice failed; using the template")
				r.outcome.WithLabelValues("error").Inc()
				a = Advice{}
			case a.Skip:
				r.outcome.WithLabelValues("skip").Inc()
			default:
				r.outcome.WithLabelValues("hint").Inc()
			}
			mu.Lock()
			keep[j.seq] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	r.mu.Lock()
	r.advice = keep
	r.mu.Unlock()
	return nil
}

func (r *Retry) adviceFor(seq int64) Advice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.advice[seq]
}

// handle decides every failure of the batch inside the runner's transaction.
func (r *Retry) handle(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
	types := typeCache{}
	for _, ev := range evs {
		if err := r.decide(ctx, tx, ev, types); err != nil {
			return fmt.Errorf("event %d (task %s): %w", ev.Seq, ev.StreamID, err)
		}
	}
	return nil
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
