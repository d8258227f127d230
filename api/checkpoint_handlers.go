package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// MaxCheckpointBodyBytes bounds a checkpoint's request body before it is
// parsed: twice the state's bound, room for a pretty-printed state that
// compacts to 64 KiB.
const MaxCheckpointBodyBytes = 2 * events.MaxCheckpointBytes

type checkpointRequest struct {
	State json.RawMessage `json:"state" openapi:"required,any" doc:"any JSON value but null, at most 64 KiB once compacted, e.g. {\"session_id\": \"...\"}"`
}

// putCheckpoint saves the latest checkpoint of a task the worker holds in
// progress (ADR 026).
func (s *Server) putCheckpoint(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req checkpointRequest
	if err := decode(c, &req, false); err != nil {
		return stateTooLarge(err)
	}
	if req.State == nil {
		return events.Invalid("state", "is required: a JSON value such as {\"session_id\": \"...\"}")
	}
	saved, err := s.db.SaveTaskCheckpoint(c.Request().Context(), id, claimsOf(c).Subject, req.State, actor(c, events.ActorWorker))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, saved)
}

// stateTooLarge names the state in a body refused for its size: the state
// is all a checkpoint's body carries.
func stateTooLarge(err error) error {
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusRequestEntityTooLarge {
		return events.TooLarge("state", "the request body is larger than %d bytes; a checkpoint's state holds at most %d (64 KiB) of compact JSON",
			MaxCheckpointBodyBytes, events.MaxCheckpointBytes)
	}
	return err
}

// attachCheckpoint gives a task that may resume the latest checkpoint of
// its retry chain. Like attachPreviousAttempts it only logs a failure (the
// task is already the worker's), and a task that has none and is no retry
// costs no query.
func (s *Server) attachCheckpoint(c echo.Context, t *store.TaskWithType) {
	if t == nil || !t.MayResume() {
		return
	}
	cp, err := s.db.LatestTaskCheckpoint(c.Request().Context(), s.db.Pool(), t.ID)
	if err != nil {
		s.log.Warn().Err(err).Str("task_id", t.ID).Str("request_id", requestID(c)).
			Msg("checkpoint unavailable; sending the task without it")
		return
	}
	t.Checkpoint = cp
}
