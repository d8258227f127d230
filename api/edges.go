package api

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/clawdbot/task-service/events"
)

// The HTTP edges (issue 11, ADR 011): what every request passes before a
// handler sees it.

// maxRequestIDLen bounds a client's X-Request-Id; it ends up in event meta.
const maxRequestIDLen = 128

// requestIDs keeps a client's X-Request-Id when it is at most 128 characters
// of [A-Za-z0-9._:-], and replaces anything else with a fresh id.
func requestIDs(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !validRequestID(id) {
			id = newRequestID()
			c.Request().Header.Set(echo.HeaderXRequestID, id)
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '.', b == '_', b == ':', b == '-':
		default:
			return false
		}
	}
	return true
}

func newRequestID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// BodyReadTimeout bounds reading a request body: a client trickling one
// holds a connection at most this long (408 timeout).
const BodyReadTimeout = 30 * time.Second

// guardBody bounds every request body before anything reads it, before
// authentication: a read deadline for every route, and, except on the
// upload route (which streams with its own caps and moves its deadline as
// bytes arrive), a size cap of MaxBodyBytes and a content type that is read
// whole: JSON for the API, a urlencoded form for the admin UI. Anything else
// (multipart above all, which net/http would spool to disk) is refused
// unread and the connection closed, so its bytes are never taken in.
// The deadline is lifted once the body is read: net/http's background read
// that follows would otherwise cancel a long-poll's context at the deadline.
func (s *Server) guardBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !hasBody(r) {
			return next(c)
		}
		rc := http.NewResponseController(c.Response())
		_ = rc.SetReadDeadline(time.Now().Add(s.bodyTimeout()))
		if c.Path() == "" || s.uploads[r.Method+" "+c.Path()] {
			return next(c) // unmatched: nothing reads the body
		}
		if ct := r.Header.Get(echo.HeaderContentType); !readWhole(ct) {
			c.Response().Header().Set(echo.HeaderConnection, "close")
			return &httpError{status: http.StatusUnsupportedMediaType, body: ErrorBody{Code: "unsupported_media_type", Field: "Content-Type",
				Message: "this route takes application/json (the API) or application/x-www-form-urlencoded (the admin UI's forms), not " + cutString(ct, 64)}}
		}
		limit := int64(MaxBodyBytes)
		if l := s.bodyLimits[r.Method+" "+c.Path()]; l > 0 {
			limit = l
		}
		r.Body = &guardedBody{r: http.MaxBytesReader(c.Response().Writer, r.Body, limit), rc: rc}
		return next(c)
	}
}

func (s *Server) bodyTimeout() time.Duration {
	if s.cfg.BodyReadTimeout > 0 {
		return s.cfg.BodyReadTimeout
	}
	return BodyReadTimeout
}

// guardedBody is a capped body that lifts the read deadline at its end.
type guardedBody struct {
	r  io.ReadCloser
	rc *http.ResponseController
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *guardedBody) Close() error { return b.r.Close() }

// bodyError names why a body could not be read: too large (413), too slow
// (408), or broken off (400).
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &httpError{status: http.StatusRequestEntityTooLarge,
			body: ErrorBody{Code: "too_large", Message: fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit)}}
	}
	var netErr net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return &httpError{status: http.StatusRequestTimeout, body: ErrorBody{Code: "timeout",
			Message: "the request body did not arrive in time; send it at once"}}
	}
	return &httpError{status: http.StatusBadRequest, body: ErrorBody{Code: "bad_request", Message: "could not read the request body"}}
}

// ReadForm reads an admin UI form post: a urlencoded body (the only kind
// its forms send) or none. The body is already bounded by guardBody.
func ReadForm(c echo.Context) error {
	r := c.Request()
	if hasBody(r) {
		mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
		if err != nil || mt != echo.MIMEApplicationForm {
			c.Response().Header().Set(echo.HeaderConnection, "close")
			return &httpError{status: http.StatusUnsupportedMediaType, body: ErrorBody{Code: "unsupported_media_type", Field: "Content-Type",
				Message: "send the form as application/x-www-form-urlencoded (an HTML form's default), not " + cutString(r.Header.Get(echo.HeaderContentType), 64)}}
		}
	}
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		if errors.As(err, &tooBig) || errors.As(err, &netErr) || errors.Is(err, os.ErrDeadlineExceeded) {
			return bodyError(err)
		}
		return events.Invalid("form", "is malformed: %v", err)
	}
	return nil
}

func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// readWhole reports whether a body of this type is read whole and is
// welcome outside the upload route: JSON (or no type, read as JSON) or a
// urlencoded form.
func readWhole(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return contentType == "" || (err == nil && (isJSON(mt) || mt == echo.MIMEApplicationForm))
}

func isJSON(mediaType string) bool {
	return mediaType == echo.MIMEApplicationJSON || strings.HasSuffix(mediaType, "+json")
}

// apiRoute wraps a route of the table with the checks its declaration
// implies: query parameters (only those it declares, each once unless it is
// a list) and, for a JSON body, a JSON content type.
func (s *Server) apiRoute(r route, next echo.HandlerFunc) echo.HandlerFunc {
	known := map[string]bool{}
	lists := map[string]bool{}
	typed := map[string]bool{}
	for _, p := range r.query {
		known[p.name] = true
		lists[p.name] = p.schema["type"] == "array"
		typed[p.name] = p.schema["type"] != "string" || p.schema["format"] != nil || p.schema["enum"] != nil || p.schema["pattern"] != nil
	}
	// The rule is the JSON API's (/api/v1/...): pages and assets served from
	// the table (the API reference, its cache-busting ?v=) keep theirs.
	strict := strings.HasPrefix(r.path, "/api/v1/")
	checks := compileQuery(r.query) // the shape validator's, from the same schemas
	return func(c echo.Context) error {
		if strict {
			if err := strictQuery(c.Request().URL.RawQuery, known, lists, typed); err != nil {
				return err
			}
			if c.Request().URL.RawQuery != "" && len(checks) > 0 {
				for name, values := range c.QueryParams() {
					check := checks[name]
					for _, v := range values {
						if check != nil && v != "" { // empty: strictQuery's
							if err := check(v); err != nil {
								return err
							}
						}
					}
				}
			}
		}
		if r.request != nil && hasBody(c.Request()) {
			if ct := c.Request().Header.Get(echo.HeaderContentType); ct != "" {
				mt, _, err := mime.ParseMediaType(ct)
				if err != nil || !isJSON(mt) {
					return &httpError{status: http.StatusUnsupportedMediaType, body: ErrorBody{Code: "unsupported_media_type",
						Message: "send the body as JSON with Content-Type: application/json, not " + ct, Field: "Content-Type"}}
				}
			}
		}
		return next(c)
	}
}

// strictQuery refuses a malformed query string, an unknown parameter, a
// single-valued parameter given twice, and an empty value where the
// document wants a number, a boolean, a format, an enum or a pattern (typed), naming
// the parameter.
func strictQuery(raw string, known, lists, typed map[string]bool) error {
	if raw == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil || key == "" {
			return events.Invalid("query", "malformed query parameter %q", cutString(rawKey, 64))
		}
		if !known[key] {
			if len(known) == 0 {
				return events.Invalid(key, "unknown query parameter: this route takes none")
			}
			return events.Invalid(key, "unknown query parameter; this route takes %s", names(known))
		}
		if strings.Contains(rawValue, ";") {
			return events.Invalid(key, "malformed value: ';' is no separator (use & between parameters, commas in a list)")
		}
		if _, err := url.QueryUnescape(rawValue); err != nil {
			return events.Invalid(key, "malformed value: %v", err)
		}
		if rawValue == "" && typed[key] {
			return events.Invalid(key, "is empty: give a value or leave the parameter out")
		}
		if seen[key] && !lists[key] {
			return events.Invalid(key, "is given more than once")
		}
		seen[key] = true
	}
	return nil
}

func names(set map[string]bool) string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func cutString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// hsts tells browsers that reached the service over HTTPS to use nothing
// else for HSTSMaxAge. Browsers ignore the header on plain HTTP, and
// sending it there would only mislead a reader of the answers.
func (s *Server) hsts(next echo.HandlerFunc) echo.HandlerFunc {
	value := "max-age=" + strconv.FormatInt(int64(s.cfg.HSTSMaxAge/time.Second), 10)
	return func(c echo.Context) error {
		if s.secureRequest(c.Request()) {
			c.Response().Header().Set("Strict-Transport-Security", value)
		}
		return next(c)
	}
}

// cors opens the API to the listed origins only (CORS_ALLOWED_ORIGINS);
// with none, no Access-Control-* header is ever sent and browsers keep other
// origins out. Credentials (cookies) are never allowed cross-origin: the
// session cookie is SameSite=Strict, and API clients send a bearer token.
func (s *Server) cors() echo.MiddlewareFunc {
	if len(s.cfg.CORSOrigins) == 0 {
		return nil
	}
	return middleware.CORSWithConfig(middleware.CORSConfig{
		AllowOrigins:     s.cfg.CORSOrigins,
		AllowMethods:     []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete},
		AllowHeaders:     []string{echo.HeaderAuthorization, echo.HeaderContentType, echo.HeaderXRequestID, "Last-Event-ID"},
		ExposeHeaders:    []string{echo.HeaderXRequestID, "Retry-After"},
		AllowCredentials: false,
		MaxAge:           600,
	})
}
