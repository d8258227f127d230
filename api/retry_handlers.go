package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
)

type retryRequest struct {
	// Hint, optional, is advice for the next attempt, added to the retry's
	// description after the failure.
	Hint string `json:"hint,omitempty" openapi:"maxLength=1000"`
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
	retry, err := s.RetryTask(c.Request().Context(), id, req.Hint, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, retry)
}
