package store

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// A manual retry that loses its race with the retry reactor's decision on
// the same failed task (the reactor wrote "retries exhausted" between the
// retry's read and its append) is decided again on what is there now, and
// creates the retry, instead of answering a conflict.
// The request's own transaction (an Idempotency-Key) is kept: the lost
// attempt is a savepoint of it.
func TestWithTxRetryingRedecidesAfterALostRace(t *testing.T) {
	t.Run("own transaction", func(t *testing.T) {
		e := newKeyedEnv(t)
		e.manualRetryLosingOneRace(t, e.user(t, "w", true, 1), e.ctx)
	})
	t.Run("inside the request's transaction", func(t *testing.T) {
		e := newKeyedEnv(t)
		w := e.user(t, "w", true, 1)
		tx, err := e.db.pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(e.ctx) }()
		e.manualRetryLosingOneRace(t, w, ContextWithTx(e.ctx, tx))
		require.NoError(t, tx.Commit(e.ctx))
	})
}

func (e *keyedEnv) manualRetryLosingOneRace(t *testing.T, w string, ctx context.Context) {
	failed, err := e.create(e.typeID, "", 0)
	require.NoError(t, err)
	e.claimAndFinish(t, w, failed.ID, events.StatusFailed)

	attempts := 0
	var retry *events.Task
	err = e.db.WithTxRetrying(ctx, func(tx pgx.Tx) error {
		attempts++
		read, err := e.db.GetTask(e.ctx, tx, failed.ID)
		if err != nil {
			return err
		}
		if attempts == 1 { // the reactor's write commits after our read
			_, _, err := e.db.UpdateTask(e.ctx, e.db.pool, failed.ID, e.admin,
				func(t *events.Task) ([]events.Payload, error) { return t.RetriesExhausted(3) })
			require.NoError(t, err)
		}
		tt, err := e.db.GetTaskType(e.ctx, tx, read.TaskTypeID)
		if err != nil {
			return err
		}
		retry, err = e.db.CreateRetryOf(e.ctx, tx, read, tt, RetryParams{Manual: true, Meta: e.admin})
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 2, attempts, "the first attempt lost the race and was run again")
	require.Equal(t, failed.ID, *retry.ParentTaskID)

	// A refusal that stays one (the task has its retry now) is returned.
	err = e.db.WithTxRetrying(ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateRetry(e.ctx, tx, failed.ID, RetryParams{Manual: true, Meta: e.admin})
		return err
	})
	require.ErrorIs(t, err, events.ErrInvalidTransition)
}
