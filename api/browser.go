package api

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
)

// SessionCookie holds a browser's login token for the admin UI (api/ui):
// HttpOnly, SameSite=Strict, Secure on secure requests (ADR 009,
// COOKIE_SECURE). Besides the UI's own
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

// CookieSecure says when the session cookie is marked Secure.
type CookieSecure string

const (
	// CookieSecureAuto marks it on secure requests (SecureRequest); the default.
	CookieSecureAuto CookieSecure = "auto"
	// CookieSecureAlways marks it on every answer: browsers then send it
	// over HTTPS only, so plain-HTTP logins stop working.
	CookieSecureAlways CookieSecure = "true"
	// CookieSecureNever never marks it.
	CookieSecureNever CookieSecure = "false"
)

// SecureCookie reports whether the session cookie set in answer to this
// request is marked Secure.
func (s *Server) SecureCookie(c echo.Context) bool {
	switch s.cfg.CookieSecure {
	case CookieSecureAlways:
		return true
	case CookieSecureNever:
		return false
	}
	return s.secureRequest(c.Request())
}

// secureRequest reports whether the browser reached the service over
// HTTPS: TLS to this server, or X-Forwarded-Proto: https set by a trusted
// proxy (TRUSTED_PROXIES), whose word is its last value. Anyone else's
// header is ignored: a client can send any.
func (s *Server) secureRequest(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto := r.Header.Values("X-Forwarded-Proto")
	if len(proto) == 0 || !s.fromTrustedProxy(r) {
		return false
	}
	last := proto[len(proto)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.EqualFold(strings.TrimSpace(last), "https")
}

// fromTrustedProxy reports whether the peer is one of TRUSTED_PROXIES.
func (s *Server) fromTrustedProxy(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	for _, n := range s.cfg.TrustedProxies {
		if ip != nil && n.Contains(ip) {
			return true
		}
	}
	return false
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
