package reactors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Daily LLM budgets (ADR 021). The budget reactor reads every usage report
// (and every change of a type's budgets) and pauses a type whose usage
// today reached a budget, through the type's own pause, with the actor
// system:budget. The runner's checkpoint makes each batch's decision once
// across instances, and the pause is a transition of the type's stream, so
// a type already paused (by anyone) is left alone. BudgetDays resumes the
// types a budget paused once their day is over: a person's pause is never
// resumed by it.

const budgetReactorID = "budget"

// budgetActor is who pauses and resumes for a budget.
var budgetActor = events.System(events.BudgetPauser)

// NewBudgetReactor returns the reactor that pauses types over budget.
func NewBudgetReactor(db *store.DB, log zerolog.Logger) Reactor {
	return Reactor{
		Name:  budgetReactorID,
		Types: []string{events.TaskUsageReported{}.EventType(), events.TaskTypeUpdated{}.EventType()},
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			return enforceBudgets(ctx, tx, db, log, evs)
		},
	}
}

// enforceBudgets pauses each type of the batch whose usage today reached a
// budget. Usage of an earlier day (read after the turn) pauses nothing.
func enforceBudgets(ctx context.Context, tx pgx.Tx, db *store.DB, log zerolog.Logger, evs []events.Envelope) error {
	today := db.Day().Of(db.Now())
	cause := map[string]int64{} // type id → the event that may have crossed
	for i := range evs {
		if evs[i].Payload == nil {
			if err := evs[i].Decode(); err != nil {
				return err
			}
		}
		switch p := evs[i].Payload.(type) {
		case events.TaskUsageReported:
			if p.Day == today {
				cause[p.TaskTypeID] = evs[i].Seq
			}
		case events.TaskTypeUpdated:
			if p.HasBudget() {
				cause[evs[i].StreamID] = evs[i].Seq
			}
		}
	}
	for typeID, seq := range cause {
		u, err := db.TypeUsageToday(ctx, tx, typeID)
		if errors.Is(err, events.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		over := u.OverBudget()
		if over == "" || u.Paused {
			continue
		}
		reason := fmt.Sprintf("%s; resumes when the day turns (%s)", over, db.Day())
		meta := events.Meta{Actor: budgetActor, CausationSeq: seq}
		_, err = db.UpdateTaskTypeIn(ctx, tx, typeID, meta, func(tt *events.TaskType) ([]events.Payload, error) {
			return tt.Pause(events.BudgetPauser, reason)
		})
		var te *events.TransitionError
		if errors.As(err, &te) { // archived meanwhile: nothing to pause
			continue
		}
		if err != nil {
			return err
		}
		log.Warn().Str("task_type", u.Name).Str("reason", reason).Msg("a daily LLM budget is spent: the type is paused")
	}
	return nil
}

// BudgetDaysConfig configures BudgetDays.
type BudgetDaysConfig struct {
	DB *store.DB
	// Check is how often it looks for budget pauses whose day is over
	// (default 1 minute); the day's turn is noticed within it.
	Check  time.Duration
	Logger zerolog.Logger
}

// BudgetDays resumes, at the day's turn, the types a budget paused.
type BudgetDays struct {
	cfg BudgetDaysConfig
}

// NewBudgetDays checks cfg; it starts nothing.
func NewBudgetDays(cfg BudgetDaysConfig) (*BudgetDays, error) {
	if cfg.DB == nil {
		return nil, errors.New("reactors: BudgetDaysConfig.DB is required")
	}
	if cfg.Check <= 0 {
		cfg.Check = time.Minute
	}
	return &BudgetDays{cfg: cfg}, nil
}

// Run looks every Check until ctx ends. Every instance may run it: a
// resume is a transition of the type's stream, so only one instance's
// resume happens and the others find the type running.
func (b *BudgetDays) Run(ctx context.Context) error {
	t := time.NewTicker(b.cfg.Check)
	defer t.Stop()
	for {
		if _, err := b.ResumeOverdue(ctx); err != nil && ctx.Err() == nil {
			b.cfg.Logger.Warn().Err(err).Msg("cannot resume the types whose budget day is over")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ResumeOverdue resumes the types a budget paused on an earlier day and
// returns how many it resumed.
func (b *BudgetDays) ResumeOverdue(ctx context.Context) (int, error) {
	db := b.cfg.DB
	types, err := db.BudgetPausedTypes(ctx)
	if err != nil {
		return 0, err
	}
	now := db.Now()
	today := db.Day().Of(now)
	n := 0
	for _, tt := range types {
		if tt.PausedAt == nil || db.Day().Of(*tt.PausedAt) == today {
			continue
		}
		reason := fmt.Sprintf("a new day, %s (%s)", today, db.Day())
		_, err := db.UpdateTaskType(ctx, tt.ID, events.Meta{Actor: budgetActor}, func(cur *events.TaskType) ([]events.Payload, error) {
			if !cur.PausedByBudget() || cur.PausedAt == nil || db.Day().Of(*cur.PausedAt) == today {
				return nil, errBudgetResumed // resumed or paused again meanwhile: not this pause's turn
			}
			return cur.Resume(events.BudgetPauser, reason)
		})
		switch {
		case errors.Is(err, errBudgetResumed), errors.Is(err, events.ErrConflict), errors.Is(err, events.ErrInvalidTransition):
			continue // another instance (or a person) got there first
		case err != nil:
			return n, err
		}
		n++
		b.cfg.Logger.Info().Str("task_type", tt.Name).Msg("a new day: the type a budget paused is resumed")
	}
	return n, nil
}

var errBudgetResumed = errors.New("the budget pause already ended")
