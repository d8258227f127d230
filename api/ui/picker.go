package ui

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The worker pickers of the forms (issue 24). While the fleet is small a
// picker is the <select> of every worker it always was; above
// workerListMax workers it is a text input whose <datalist> htmx fills with
// the workers whose name or email starts with what is typed. A suggestion
// reads "Name <email>" (unique, and what a browser matches the typed text
// against); the server turns that text, a bare email, a name only one
// worker has, or an id into the worker's id (resolveWorker). So no page
// reads more than workerListMax+1 workers, and no form needs script to
// submit.

const (
	// workerListMax is the most workers a picker lists as a <select>.
	workerListMax = 200
	// workerSuggestionsMax bounds the suggestions for one typed text.
	workerSuggestionsMax = 20
)

// workerPicker is one worker field of a form: the "worker-picker" partial.
type workerPicker struct {
	Name  string // the form field
	ID    string // the element's id
	Blank string // what no worker means here: "anyone", "the pool"
	Value string // the chosen worker's id, or the text that named none
	Error string
	// Choices are every worker, by name, while they are at most
	// workerListMax; Many says there are more (and Choices is empty).
	Choices []store.WorkerRef
	Many    bool
	// Text is what the text input shows: the chosen worker as a
	// suggestion reads, or the text that named none.
	Text string
}

// Known says the value is one of the choices.
func (p *workerPicker) Known() bool {
	for _, w := range p.Choices {
		if w.ID == p.Value {
			return true
		}
	}
	return false
}

// workerPicker reads what a picker offers: the first workerListMax+1
// workers, and the chosen one's name and email when they are more.
func (u *UI) workerPicker(ctx context.Context, name, id, blank, value, fieldErr string) (*workerPicker, error) {
	p := &workerPicker{Name: name, ID: id, Blank: blank, Value: value, Error: fieldErr, Text: value}
	ws, err := u.db.Workers(ctx, workerListMax+1)
	if err != nil {
		return nil, err
	}
	if len(ws) <= workerListMax {
		p.Choices = ws
		return p, nil
	}
	p.Many = true
	if wid, err := uuidField(name, value); err == nil {
		w, err := u.db.GetUser(ctx, wid)
		switch {
		case err == nil:
			p.Text = suggestion(w.FullName, w.Email)
		case !errors.Is(err, events.ErrNotFound):
			return nil, err
		}
	}
	return p, nil
}

// suggestion is how a picker names a worker, and what resolveWorker reads back.
func suggestion(name, email string) string { return name + " <" + email + ">" }

// resolveWorker turns what a picker sent into a worker's id: "" stays "",
// an id is kept (the command checks it names a worker), and text names the
// worker whose email it is or ends with in <>, or the one worker with that
// name; else the field is refused, saying how to pick.
func (u *UI) resolveWorker(ctx context.Context, field, v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if id, err := uuidField(field, v); err == nil {
		return id, nil
	}
	key := v
	if i := strings.LastIndex(v, "<"); i >= 0 && strings.HasSuffix(v, ">") {
		key = strings.TrimSpace(v[i+1 : len(v)-1])
	}
	if !searchable(key) {
		return "", events.Invalid(field, "is not a worker's name or email: type the start of one and pick a suggestion")
	}
	// An exact email comes first, and an exact name first among the names
	// it starts (MatchWorkers).
	ms, err := u.db.MatchWorkers(ctx, key, workerSuggestionsMax)
	if err != nil {
		return "", err
	}
	var named []string
	for _, m := range ms {
		if strings.EqualFold(m.Email, key) {
			return m.ID, nil
		}
		if strings.EqualFold(m.Name, key) {
			named = append(named, m.ID)
		}
	}
	switch len(named) {
	case 1:
		return named[0], nil
	case 0:
		return "", events.Invalid(field, "no worker is named %q or has that email: type the start of a name or email and pick a suggestion", v)
	}
	many := strconv.Itoa(len(named))
	if len(ms) == workerSuggestionsMax {
		many += " or more" // the read stopped at its bound
	}
	return "", events.Invalid(field, "%s workers are named %q: pick one of the suggestions, which show each one's email", many, v)
}

// resolveFilter is q with the worker its field names (a list's filter)
// turned into the worker's id, so that the page's links and live refresh
// carry the id.
func (u *UI) resolveFilter(ctx context.Context, q url.Values, field string) (url.Values, error) {
	id, err := u.resolveWorker(ctx, field, q.Get(field))
	if err != nil || id == q.Get(field) {
		return q, err
	}
	q = cloneValues(q)
	q.Set(field, id)
	return q, nil
}

// workerSuggestions answers a picker's typing: the <option>s of at most
// workerSuggestionsMax workers whose name or email starts with the text
// of the field the query names.
func (u *UI) workerSuggestions(c echo.Context) error {
	text := strings.TrimSpace(c.QueryParam(c.QueryParam("field")))
	var b strings.Builder
	if text != "" && searchable(text) {
		ms, err := u.db.MatchWorkers(c.Request().Context(), text, workerSuggestionsMax)
		if err != nil {
			return u.fail(c, err)
		}
		for _, m := range ms {
			b.WriteString(`<option value="` + template.HTMLEscapeString(suggestion(m.Name, m.Email)) + `"></option>`)
		}
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.HTML(http.StatusOK, b.String())
}

// searchable says text can be a worker's name or email, as SQL reads it:
// not too long (an email is at most 320 bytes), valid UTF-8, no NUL.
func searchable(text string) bool {
	return len(text) <= 320 && utf8.ValidString(text) && !strings.ContainsRune(text, 0)
}

// userNames names the users among ids (repeats and "" ignored) for the
// rows a page shows: one read of just those.
func (u *UI) userNames(ctx context.Context, ids ...string) (map[string]string, error) {
	seen := map[string]bool{"": true}
	var list []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			list = append(list, id)
		}
	}
	if len(list) == 0 {
		return map[string]string{}, nil
	}
	return u.db.UserNames(ctx, list)
}
