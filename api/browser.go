package api

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
)

// SessionCookie holds a browser's login token for the admin UI (api/ui):
// HttpOnly, SameSite=Strict, Secure over TLS (ADR 009). Besides the UI's own
// pages it opens only the event stream, a GET: every other API route takes
// the bearer token alone, so no API write can be forged from a browser.
const SessionCookie = "task_session"

// sessionCookie is the session token a browser sent, or "".
func sessionCookie(c echo.Context) string {
	ck, err := c.Cookie(SessionCookie)
	if err != nil {
		return ""
	}
	return ck.Value
}

// Role names for Verify.
const (
	RoleAdmin  = roleAdmin
	RoleWorker = roleWorker
)

// Verify checks a login token and that its bearer has role, as every
// authenticated route does; the admin UI calls it with its session cookie.
// The claims it returns are shared: read them, never change them.
func (s *Server) Verify(ctx context.Context, raw, role string) (*Claims, error) {
	claims, err := s.parseToken(raw)
	if err != nil {
		return nil, err
	}
	if err := s.activeUser(ctx, claims, role); err != nil {
		return nil, err
	}
	return claims, nil
}

// Classify maps an error to the HTTP status and body the API would answer
// with, so the admin UI shows the same codes and fields.
func Classify(err error) (int, ErrorBody) { return classify(err) }

// EventViews gives events their one-line summaries and actor names, as
// the history routes show them.
func (s *Server) EventViews(ctx context.Context, evs []events.Envelope) ([]EventView, error) {
	return s.views(ctx, evs)
}
