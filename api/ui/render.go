package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/timing"
	"github.com/clawdbot/task-service/store/whatif"
)

//go:embed templates static
var files embed.FS

// assets are the embedded static files, each with a version for its URL
// (cached for a year; a new build changes the version).
type assets struct {
	body    map[string][]byte
	version map[string]string
}

func newAssets() (*assets, error) {
	a := &assets{body: map[string][]byte{}, version: map[string]string{}}
	entries, err := fs.ReadDir(files, "static")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := files.ReadFile("static/" + e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		a.body[e.Name()] = b
		a.version[e.Name()] = hex.EncodeToString(sum[:6])
	}
	return a, nil
}

// url is an asset's versioned address; it panics on a name that does not
// exist, which the template test catches.
func (a *assets) url(name string) string {
	v, ok := a.version[name]
	if !ok {
		panic("ui: no asset " + name)
	}
	return "/static/" + name + "?v=" + v
}

func (u *UI) asset(c echo.Context) error {
	name := c.Param("name")
	b, ok := u.assets.body[name]
	if !ok {
		return u.notFound(c, "no such file")
	}
	h := c.Response().Header()
	if c.QueryParam("v") == u.assets.version[name] {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	return c.Blob(http.StatusOK, mime.TypeByExtension(path.Ext(name)), b)
}

// views holds one parsed template set per page: the common layout and
// partials plus that page's view.
type views struct {
	pages map[string]*template.Template
}

func parseViews(as *assets) (*views, error) {
	base, err := template.New("").Funcs(funcs(as)).ParseFS(files, "templates/common/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parse common templates: %w", err)
	}
	names, err := fs.Glob(files, "templates/views/*.html")
	if err != nil {
		return nil, err
	}
	vs := &views{pages: map[string]*template.Template{}}
	for _, file := range names {
		t, err := template.Must(base.Clone()).ParseFS(files, file)
		if err != nil {
			return nil, fmt.Errorf("ui: parse %s: %w", file, err)
		}
		vs.pages[strings.TrimSuffix(path.Base(file), ".html")] = t
	}
	return vs, nil
}

// page is what every template gets: the frame's facts and the page's Data.
type page struct {
	View  string
	Title string
	Path  string // the request's path and query, for live refreshes
	Nav   []navItem
	User  string
	CSRF  string
	Data  any
}

// render writes view with data inside the layout.
func (u *UI) render(c echo.Context, status int, view string, data any) error {
	t, ok := u.views.pages[view]
	if !ok {
		return fmt.Errorf("ui: no view %q", view)
	}
	p := page{View: view, Path: c.Request().URL.RequestURI(), Nav: menu(), Data: data}
	if cl := claimsOf(c); cl != nil {
		p.User = cl.Email
		p.CSRF = u.csrfToken(sessionToken(c))
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		return fmt.Errorf("ui: render %s: %w", view, err)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.HTMLBlob(status, buf.Bytes())
}

// errorData is the error view's data.
type errorData struct {
	Status  int
	Heading string
	Message string
}

// fail renders err as a page with the status the JSON API would answer
// (404 for an unknown id, 400 for a bad filter); a 5xx is logged and its
// text hidden.
func (u *UI) fail(c echo.Context, err error) error {
	status, body := api.Classify(err)
	switch {
	case status == http.StatusServiceUnavailable:
		// The database is away (restarting, failing over): the page says
		// so, with the API's 503 and Retry-After, and it is no server bug.
		u.log.Warn().Err(err).Str("path", c.Path()).Str("request_id", c.Response().Header().Get(echo.HeaderXRequestID)).Msg("ui page: database unavailable")
		c.Response().Header().Set("Retry-After", strconv.Itoa(api.UnavailableRetryAfter))
	case status >= 500 || status < 400:
		u.log.Error().Err(err).Str("path", c.Path()).Str("request_id", c.Response().Header().Get(echo.HeaderXRequestID)).Msg("ui page failed")
		status = http.StatusInternalServerError
	}
	if status == 499 { // the client left; nobody reads this
		return nil
	}
	heading := http.StatusText(status)
	if status == http.StatusNotFound {
		heading = "Not found"
	}
	return u.render(c, status, "error", errorData{Status: status, Heading: heading, Message: body.Message})
}

func (u *UI) notFound(c echo.Context, msg string) error {
	return u.fail(c, fmt.Errorf("%w: %s", events.ErrNotFound, msg))
}

// formErrors maps field names (the API's field or JSON path) to messages.
type formErrors map[string]string

// errorsOf turns a command's error into messages at fields; an error with
// no field goes under "". Only 4xx errors come back: anything else is the
// server's fault and is returned as is.
func errorsOf(err error) (formErrors, int, error) {
	status, body := api.Classify(err)
	if status < 400 || status >= 500 {
		return nil, 0, err
	}
	fe := formErrors{}
	var pe *api.ParamsError
	if errors.As(err, &pe) {
		// Every field the schema refuses, each at its input.
		for _, f := range pe.Fields {
			fe[f.Field] = f.Error()
		}
		return fe, status, nil
	}
	field := body.Field
	if field == "params" {
		// "missing property 'ticker'" belongs at params.ticker.
		if _, after, ok := strings.Cut(body.Message, "missing property '"); ok {
			if name, _, ok := strings.Cut(after, "'"); ok {
				field = "params." + name
			}
		}
	}
	fe[field] = body.Message
	return fe, status, nil
}

func funcs(as *assets) template.FuncMap {
	return template.FuncMap{
		"asset": as.url,
		// whatifTotals is the what-if table's footer row.
		"whatifTotals": func(c whatif.ChainCounts) whatif.TypeCounts {
			return whatif.TypeCounts{Type: "All types", ChainCounts: c}
		},
		// retryBadge is a retry's place in its chain: "Retry 2/3", or, for a
		// manual retry past the type's automatic ones, "Retry 2 (manual)".
		"retryBadge": func(count, max int) template.HTML {
			if count <= 0 {
				return ""
			}
			if count > max {
				return template.HTML(fmt.Sprintf(`<span class="badge" title="retry %d, asked for by hand: the type retries automatically at most %d %s">Retry %d (manual)</span>`,
					count, max, plural(max, "time", "times"), count))
			}
			return template.HTML(fmt.Sprintf(`<span class="badge" title="retry %d of at most %d">Retry %d/%d</span>`, count, max, count, max))
		},
		// plural picks the word for n: {{plural .N "task" "tasks"}}.
		"plural": plural,
		// atField is a field's error with the field's name in front, once.
		"atField": func(field, msg string) string {
			if strings.HasPrefix(msg, field+": ") {
				return msg
			}
			return field + ": " + msg
		},
		// time shows an instant in UTC, saying so; app.js turns it into the
		// viewer's local time and keeps UTC in the tooltip.
		"time": func(t any) template.HTML {
			at, ok := instant(t)
			if !ok {
				if s, isString := t.(string); isString {
					return template.HTML(template.HTMLEscapeString(s))
				}
				return "—"
			}
			return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
				at.Format(time.RFC3339), utcText(at), utcText(at)))
		},
		// utc is time as plain text, for attributes.
		"utc": func(t any) string {
			if at, ok := instant(t); ok {
				return utcText(at)
			}
			return "—"
		},
		// clock is the time of day of an event's occurred_at, to the millisecond.
		"clock": func(at string) string {
			if len(at) >= 23 {
				return at[11:23]
			}
			return at
		},
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"ago": func(t *time.Time) string {
			if t == nil {
				return "never"
			}
			return agoText(time.Since(*t))
		},
		"str": func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		},
		"short": func(id string) string {
			if len(id) > 8 {
				return id[:8]
			}
			return id
		},
		"seconds": func(p *float64) string {
			if p == nil {
				return "—"
			}
			return (time.Duration(*p * float64(time.Second))).Round(time.Millisecond).String()
		},
		// nameOf is a user's name from names, else the start of its id.
		"nameOf": func(names map[string]string, id any) string {
			var s string
			switch v := id.(type) {
			case string:
				s = v
			case *string:
				if v == nil {
					return "—"
				}
				s = *v
			}
			if n := names[s]; n != "" {
				return n
			}
			return shortID(s)
		},
		"add":   func(a, b int) int { return a + b },
		"bytes": events.HumanBytes,
		// Schedules (issue 13).
		"list":     func(xs ...string) []string { return xs },
		"describe": func(s *events.Schedule) string { return timing.Describe(s.ScheduleTiming) },
		"percent":  func(p *float64) string { return fmt.Sprintf("%.0f %%", *p*100) },
		"selected": func(a, b string) bool { return a == b },
		"errorFor": func(fe formErrors, field string) string { return fe[field] },
		// Workflows.
		"progress": progressText,
		"join":     strings.Join,
		"duration": func(s float64) string { return time.Duration(s * float64(time.Second)).Round(time.Second).String() },
		"fieldID": func(field string) string {
			return "f-" + strings.NewReplacer(".", "-", "[", "-", "]", "").Replace(field)
		},
	}
}

func agoText(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// instant reads a time.Time or a non-nil *time.Time that is not zero.
func instant(t any) (time.Time, bool) {
	switch v := t.(type) {
	case time.Time:
		return v, !v.IsZero()
	case *time.Time:
		if v != nil {
			return *v, !v.IsZero()
		}
	}
	return time.Time{}, false
}

func utcText(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" }
