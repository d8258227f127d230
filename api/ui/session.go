package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

const claimsKey = "ui.claims"

func claimsOf(c echo.Context) *api.Claims {
	cl, _ := c.Get(claimsKey).(*api.Claims)
	return cl
}

// actor is the logged-in admin as the events' actor.
func actor(c echo.Context) events.Meta {
	return events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: claimsOf(c).Subject},
		RequestID: c.Response().Header().Get(echo.HeaderXRequestID)}
}

func sessionToken(c echo.Context) string {
	ck, err := c.Cookie(api.SessionCookie)
	if err != nil {
		return ""
	}
	return ck.Value
}

// requireAdmin lets a request with a valid admin session through; anyone
// else goes to the login page, which brings them back here afterwards.
func (u *UI) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		raw := sessionToken(c)
		if raw == "" {
			return u.toLogin(c, "")
		}
		claims, err := u.api.Verify(c.Request().Context(), raw, api.RoleAdmin)
		if err != nil {
			status, body := api.Classify(err)
			if status == http.StatusUnauthorized {
				return u.toLogin(c, "Your session ended; log in again.")
			}
			if status == http.StatusForbidden {
				return u.render(c, http.StatusForbidden, "error", errorData{Status: status, Heading: "Admins only",
					Message: "This account is not an admin. " + body.Message})
			}
			return u.fail(c, err)
		}
		c.Set(claimsKey, claims)
		return next(c)
	}
}

// toLogin redirects to the login page with the way back: a 303 for a page,
// HX-Redirect for an htmx request, a 401 for the session probe.
func (u *UI) toLogin(c echo.Context, notice string) error {
	back := c.Request().URL.RequestURI()
	if c.Request().Header.Get("HX-Request") == "true" {
		if cur, err := url.Parse(c.Request().Header.Get("HX-Current-URL")); err == nil && cur.Path != "" {
			back = cur.RequestURI()
		}
	}
	if c.Request().Method != http.MethodGet {
		back = "/"
	}
	q := url.Values{}
	if u.safeNext(back) != "/" {
		q.Set("next", back)
	}
	// An htmx request comes from a page that was open while logged in: with
	// no session now, the login ended there too (a cleared cookie, say).
	if notice != "" || c.Request().Header.Get("HX-Request") == "true" {
		q.Set("expired", "1")
	}
	to := "/login"
	if len(q) > 0 {
		to += "?" + q.Encode()
	}
	if c.Path() == "/session" {
		return c.NoContent(http.StatusUnauthorized)
	}
	if c.Request().Header.Get("HX-Request") == "true" {
		c.Response().Header().Set("HX-Redirect", to)
		return c.NoContent(http.StatusOK)
	}
	return c.Redirect(http.StatusSeeOther, to)
}

// safeNext keeps the way back after a login on one of the UI's own pages:
// a path of printable ASCII (no backslash, space or control character,
// which browsers strip or read as a slash, turning /<TAB>/host into
// //host) that parses without scheme or host and matches a page of the
// route table. Anything else goes to the dashboard. The answer is the
// parsed URL written out again, never the input.
func (u *UI) safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if b := next[i]; b <= ' ' || b >= 0x7f || b == '\\' {
			return "/"
		}
	}
	to, err := url.Parse(next)
	if err != nil || to.Scheme != "" || to.Host != "" || to.User != nil || to.Opaque != "" || !u.isPage(to.EscapedPath()) {
		return "/"
	}
	to.Fragment, to.RawFragment = "", ""
	return to.RequestURI()
}

// isPage reports whether path (escaped) is a page of the UI: a GET route
// that needs a login, each :param one non-empty segment.
func (u *UI) isPage(path string) bool {
	segments := strings.Split(path, "/")
	for _, pattern := range u.pages {
		if len(pattern) != len(segments) {
			continue
		}
		match := true
		for i, p := range pattern {
			if strings.HasPrefix(p, ":") && segments[i] != "" || p == segments[i] {
				continue
			}
			match = false
			break
		}
		if match {
			return true
		}
	}
	return false
}

// session answers 204 while the login lasts: the live views ask it when
// their event stream is refused, to tell an expired login from an outage.
func (u *UI) session(c echo.Context) error { return c.NoContent(http.StatusNoContent) }

type loginData struct {
	Email   string
	Next    string
	Error   string
	Expired bool
}

func (u *UI) loginPage(c echo.Context) error {
	return u.render(c, http.StatusOK, "login", loginData{Next: u.safeNext(c.QueryParam("next")),
		Expired: c.QueryParam("expired") != ""})
}

func (u *UI) login(c echo.Context) error {
	email, password := strings.TrimSpace(c.FormValue("email")), c.FormValue("password")
	data := loginData{Email: email, Next: u.safeNext(c.FormValue("next"))}
	resp, err := u.api.Login(c, email, password)
	if err != nil {
		fe, status, err := errorsOf(err)
		if err != nil {
			return u.fail(c, err)
		}
		for _, m := range fe {
			data.Error = m
		}
		return u.render(c, status, "login", data)
	}
	if !resp.User.IsAdmin {
		data.Error = "This account is not an admin; the admin UI is for admins."
		return u.render(c, http.StatusForbidden, "login", data)
	}
	c.SetCookie(&http.Cookie{Name: api.SessionCookie, Value: resp.Token, Path: "/", Expires: resp.ExpiresAt,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.api.SecureCookie(c)})
	return c.Redirect(http.StatusSeeOther, data.Next)
}

func (u *UI) logout(c echo.Context) error {
	c.SetCookie(&http.Cookie{Name: api.SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.api.SecureCookie(c)})
	return c.Redirect(http.StatusSeeOther, "/login")
}

// csrfToken is bound to the session: an HMAC of its token, so it needs no
// storage and dies with the login.
func (u *UI) csrfToken(session string) string {
	m := hmac.New(sha256.New, u.cfg.Secret)
	m.Write([]byte("task-service ui csrf\x00" + session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF refuses a state-changing request from another origin, and,
// when token, one without the session's token (form field _csrf or the
// X-CSRF-Token header that app.js adds to htmx requests). The login form
// has no session to bind a token to: the Origin check covers it.
func (u *UI) checkCSRF(next echo.HandlerFunc, token bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !sameOrigin(c.Request()) {
			return u.render(c, http.StatusForbidden, "error", errorData{Status: http.StatusForbidden,
				Heading: "Refused", Message: "This request came from another site (its Origin does not match); nothing was changed."})
		}
		if session := sessionToken(c); token && session != "" {
			got := c.Request().Header.Get("X-CSRF-Token")
			if got == "" {
				got = c.FormValue("_csrf")
			}
			if !hmac.Equal([]byte(got), []byte(u.csrfToken(session))) {
				return u.render(c, http.StatusForbidden, "error", errorData{Status: http.StatusForbidden,
					Heading: "Refused", Message: "The form's security token is missing or stale; reload the page and try again. Nothing was changed."})
			}
		}
		return next(c)
	}
}

// readForm reads a form post before anything else looks at it: a
// urlencoded body within the API's bounds (api.ReadForm), else an error
// page (415, 413, 408, 400).
func (u *UI) readForm(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := api.ReadForm(c); err != nil {
			return u.fail(c, err)
		}
		return next(c)
	}
}

// sameOrigin checks Origin (or, without it, Referer) against the host the
// request was sent to. Browsers send Origin on every POST; a request with
// neither is refused.
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	o, err := url.Parse(from)
	if from == "" || err != nil {
		return false
	}
	return o.Host == r.Host
}
