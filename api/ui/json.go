package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

// Pages show JSON that clients sent (params, results, metadata, event
// data) indented, and what an older release stored may nest thousands of
// levels deep: json.Indent's output grows with the square of the depth
// (an 18 KB result 9,000 deep made a 324 MB page). So the indentation is
// capped, and a page shows at most a bound of each value, with a link to
// the whole.

const (
	// maxShownJSON bounds the indented JSON a page shows of one value.
	maxShownJSON = 64 << 10
	// maxShownRowJSON bounds the JSON of one row of a list that shows
	// many: an event of a timeline, a worker's metadata.
	maxShownRowJSON = 16 << 10
	// maxIndentLevels caps the indentation: deeper levels line up with
	// this one, so a line's indentation is at most 2*maxIndentLevels.
	maxIndentLevels = 24
)

var indentation = strings.Repeat("  ", maxIndentLevels)

// shownJSON is a value as a page shows it.
type shownJSON struct {
	Text string // indented, at most the page's bound
	Cut  bool   // Text is only the value's start
	Size int64  // the whole value's size, compact
	Raw  string // where the whole value downloads ("" when nowhere)
}

// Shown is the size of Text.
func (s shownJSON) Shown() int64 { return int64(len(s.Text)) }

// showJSON indents raw for a page, within limit bytes; rawURL downloads
// the whole value when it is cut.
func showJSON(raw []byte, limit int, rawURL string) shownJSON {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return shownJSON{}
	}
	text, cut := indentJSON(raw, limit)
	return shownJSON{Text: text, Cut: cut, Size: int64(len(raw)), Raw: rawURL}
}

// formJSON is raw for a form's text box, which must hold all of it:
// indented when that stays within maxShownJSON, else compact as stored.
func formJSON(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if text, cut := indentJSON(raw, maxShownJSON); !cut {
		return text
	}
	return string(raw)
}

// indentJSON indents raw (valid JSON) by two spaces a level, up to
// maxIndentLevels, and stops once limit bytes are written: its work and
// memory follow what it writes, never the depth. It reports whether it
// stopped before the end.
func indentJSON(raw []byte, limit int) (string, bool) {
	var b strings.Builder
	depth := 0
	newline := func() {
		b.WriteByte('\n')
		b.WriteString(indentation[:2*min(depth, maxIndentLevels)])
	}
	inString, escaped := false, false
	i := 0
	for ; i < len(raw) && b.Len() < limit; i++ {
		c := raw[i]
		if inString {
			b.WriteByte(c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			b.WriteByte(c)
		case '{', '[':
			if j := skipSpace(raw, i+1); j < len(raw) && (raw[j] == '}' || raw[j] == ']') {
				b.WriteByte(c)
				b.WriteByte(raw[j])
				i = j
				continue
			}
			b.WriteByte(c)
			depth++
			newline()
		case '}', ']':
			depth = max(depth-1, 0)
			newline()
			b.WriteByte(c)
		case ',':
			b.WriteByte(c)
			newline()
		case ':':
			b.WriteString(": ")
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	if i >= len(raw) && len(out) <= limit {
		return out, false
	}
	return strings.ToValidUTF8(out[:min(len(out), limit)], ""), true
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// compactJSON is v as compact JSON for showJSON ("null" if it cannot be
// encoded).
func compactJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}

// downloadJSON sends raw whole, as a download that no browser runs, for
// a value a page shows only the start of.
func downloadJSON(c echo.Context, filename string, raw []byte) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("null")
	}
	h := c.Response().Header()
	api.SetDownloadHeaders(h, filename, "application/json")
	h.Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, h.Get(echo.HeaderContentType), raw)
}

// taskJSON downloads a task's params or result.
func (u *UI) taskJSON(part string) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := uuidField("id", c.Param("id"))
		if err != nil {
			return u.notFound(c, "no task "+c.Param("id"))
		}
		t, err := u.db.GetTask(c.Request().Context(), u.db.Pool(), id)
		if err != nil {
			return u.fail(c, err)
		}
		raw := t.Params
		if part == "result" {
			raw = t.Result
		}
		return downloadJSON(c, "task-"+id+"-"+part+".json", raw)
	}
}

// workerMetadata downloads the metadata of a worker's last heartbeat.
func (u *UI) workerMetadata(c echo.Context) error {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return u.notFound(c, "no worker "+c.Param("id"))
	}
	w, err := u.db.GetWorkerView(c.Request().Context(), id)
	if err != nil {
		return u.fail(c, err)
	}
	return downloadJSON(c, "worker-"+id+"-metadata.json", w.Metadata)
}

// formValueJSON is a form field holding JSON, checked as the API checks
// JSON a client sends (validity, depth, surrogates, duplicate keys); nil
// when the field is empty. An error is the field's, with the JSON path
// inside it in the message: the form has one box for the whole value.
func formValueJSON(field, value string) (json.RawMessage, error) {
	raw := strings.TrimSpace(value)
	if raw == "" {
		return nil, nil
	}
	if err := api.CheckJSON(field, []byte(raw)); err != nil {
		var ve *events.ValidationError
		if errors.As(err, &ve) && ve.Field != field {
			return nil, events.Invalid(field, "%s: %s", ve.Field, ve.Message)
		}
		return nil, err
	}
	return json.RawMessage(raw), nil
}
