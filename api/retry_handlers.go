package api

import (
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type retryRequest struct {
	// Hint, optional, is advice for the next attempt, added to the retry's
	// description after the failure.
	Hint string `json:"hint,omitempty"`
}

const maxRetryHint = 1000

// retryTask creates the retry of a failed task now, by hand: allowed unless
// the task already has a retry (after the automatic decision skipped or
// exhausted, too).
func (s *Server) retryTask(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req retryRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	if len(req.Hint) > maxRetryHint {
		return events.Invalid("hint", "is longer than %d bytes", maxRetryHint)
	}
	ctx := c.Request().Context()
	meta := actor(c, events.ActorAdmin)
	var retry *events.Task
	err = s.db.WithTx(ctx, func(tx pgx.Tx) error {
		retry, err = s.db.CreateRetry(ctx, tx, id, store.RetryParams{Hint: strings.TrimSpace(req.Hint), Manual: true, Meta: meta})
		return err
	})
	if err != nil {
		return err
	}
	s.metrics.countEvents("task.created", "task.retried", "task.update_posted")
	return ok(c, http.StatusCreated, retry)
}
