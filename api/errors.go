package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// ErrorBody is the error half of the envelope.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Details carry what a client acts on, e.g. the task that holds a
	// unique key (existing_task_id).
	Details map[string]string `json:"details,omitempty"`
}

type envelope struct {
	Success bool       `json:"success"`
	Data    any        `json:"data"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// ok writes a success envelope.
func ok(c echo.Context, status int, data any) error {
	return c.JSON(status, envelope{Success: true, Data: data})
}

// httpError carries an explicit status and code, for conditions that are not
// domain errors (a missing token, a malformed body).
type httpError struct {
	status int
	body   ErrorBody
	// retryAfter, when set, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *httpError) Error() string { return e.body.Message }

func unauthenticated(msg string) error {
	return &httpError{status: http.StatusUnauthorized, body: ErrorBody{Code: "unauthenticated", Message: msg}}
}

func unavailable(msg string) error {
	return &httpError{status: http.StatusServiceUnavailable, body: ErrorBody{Code: "unavailable", Message: msg}}
}

func forbidden(msg string) error {
	return &httpError{status: http.StatusForbidden, body: ErrorBody{Code: "forbidden", Message: msg}}
}

// statusUnknownRef answers a well-formed request naming a worker or task
// type that is not there (unknown_reference).
const statusUnknownRef = http.StatusUnprocessableEntity

// UnavailableRetryAfter is the Retry-After (seconds) of a 503, the admin
// UI's too.
const UnavailableRetryAfter = 5

// statusClientClosed is nginx's 499: the client closed the request.
const statusClientClosed = 499

// classify maps any error to a status and body: the one place that does.
func classify(err error) (int, ErrorBody) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, he.body
	}
	var ve *events.ValidationError
	if errors.As(err, &ve) {
		return http.StatusBadRequest, ErrorBody{Code: "validation_failed", Message: ve.Error(), Field: ve.Field}
	}
	var ur *events.UnknownReferenceError
	if errors.As(err, &ur) {
		return statusUnknownRef, ErrorBody{Code: "unknown_reference", Message: ur.Error(), Field: ur.Field}
	}
	var st *events.StateError
	if errors.As(err, &st) {
		return http.StatusConflict, ErrorBody{Code: "conflict", Message: st.Error(), Field: st.Field}
	}
	var tl *events.TooLargeError
	if errors.As(err, &tl) {
		return http.StatusRequestEntityTooLarge, ErrorBody{Code: "too_large", Message: tl.Message, Field: tl.Field}
	}
	var dt *events.DuplicateTaskError
	if errors.As(err, &dt) {
		return http.StatusConflict, ErrorBody{Code: "duplicate_task", Message: dt.Error(), Field: "unique_key",
			Details: map[string]string{"existing_task_id": dt.TaskID}}
	}
	var de *events.DuplicateError
	if errors.As(err, &de) {
		return http.StatusConflict, ErrorBody{Code: "duplicate", Message: de.Error(), Field: de.Field}
	}
	var ee *echo.HTTPError
	if errors.As(err, &ee) {
		return ee.Code, ErrorBody{Code: statusCode(ee.Code), Message: http.StatusText(ee.Code)}
	}
	if store.IsUnavailable(err) {
		return http.StatusServiceUnavailable, ErrorBody{Code: "unavailable", Message: "the database is unavailable; retry later"}
	}
	switch {
	case errors.Is(err, context.Canceled):
		// The client went away (a worker shutting down mid-claim): nobody reads
		// the answer and the server did nothing wrong, so it is not a 5xx.
		return statusClientClosed, ErrorBody{Code: "client_closed", Message: "the client closed the request"}
	case errors.Is(err, events.ErrNotFound):
		return http.StatusNotFound, ErrorBody{Code: "not_found", Message: err.Error()}
	case errors.Is(err, events.ErrInvalid):
		return http.StatusBadRequest, ErrorBody{Code: "validation_failed", Message: err.Error()}
	case errors.Is(err, events.ErrInvalidTransition):
		return http.StatusConflict, ErrorBody{Code: "invalid_transition", Message: err.Error()}
	case errors.Is(err, events.ErrConflict):
		return http.StatusConflict, ErrorBody{Code: "conflict", Message: err.Error()}
	case errors.Is(err, events.ErrForbidden):
		return http.StatusForbidden, ErrorBody{Code: "forbidden", Message: "this task is not yours"}
	case errors.Is(err, events.ErrUnauthenticated):
		return http.StatusUnauthorized, ErrorBody{Code: "unauthenticated", Message: err.Error()}
	}
	return http.StatusInternalServerError, ErrorBody{Code: "internal", Message: "internal error; quote the request id to the operators"}
}

func statusCode(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal"
	}
	return "bad_request"
}

// errorHandler is echo's HTTPErrorHandler: it writes the envelope and logs
// only what the server got wrong, with the request id, never its text to the
// client.
func errorHandler(log zerolog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := classify(err)
		var he *httpError
		if errors.As(err, &he) && he.retryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(he.retryAfter))
		}
		if status == http.StatusServiceUnavailable && c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", strconv.Itoa(UnavailableRetryAfter))
		}
		if status == http.StatusServiceUnavailable && store.IsUnavailable(err) {
			log.Warn().Err(err).Str("request_id", requestID(c)).Str("path", c.Path()).Msg("database unavailable")
		} else if status >= 500 {
			log.Error().Err(err).Str("request_id", requestID(c)).Str("path", c.Path()).Msg("request failed")
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, envelope{Success: false, Error: &body})
	}
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

func isNotFound(err error) bool { return errors.Is(err, events.ErrNotFound) }
