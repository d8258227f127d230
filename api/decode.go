package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 1 << 20

// decode reads exactly one JSON object into v, strictly: unknown fields,
// wrong types, trailing data and oversize bodies are errors naming what is
// at fault. An empty body is allowed when emptyOK (all fields optional).
func decode(c echo.Context, v any, emptyOK bool) error {
	body := http.MaxBytesReader(c.Response(), c.Request().Body, MaxBodyBytes)
	return decodeJSON(body, v, emptyOK)
}

// decodeJSON is decode without echo, for the fuzz target.
func decodeJSON(r io.Reader, v any, emptyOK bool) error {
	raw, err := readAll(r)
	if err != nil {
		return err
	}
	if len(raw) == 0 {
		if emptyOK {
			return nil
		}
		return events.Invalid("body", "is empty; send a JSON object")
	}
	if raw[0] != '{' {
		return events.Invalid("body", "must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return events.Invalid("body", "has data after the JSON object")
	}
	if bytes.Contains(raw, nulEscape) {
		if path, found := findNUL(raw); found {
			return events.Invalid(path, "must not contain the NUL character (\\u0000)")
		}
	}
	return nil
}

// readBody reads the request body, bounded by MaxBodyBytes, without the
// white space around it.
func readBody(c echo.Context) ([]byte, error) {
	return readAll(http.MaxBytesReader(c.Response(), c.Request().Body, MaxBodyBytes))
}

// readAll reads a bounded body; too large is a 413.
func readAll(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &httpError{status: http.StatusRequestEntityTooLarge,
				body: ErrorBody{Code: "too_large", Message: fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit)}}
		}
		return nil, &httpError{status: http.StatusBadRequest, body: ErrorBody{Code: "bad_request", Message: "could not read the request body"}}
	}
	return bytes.TrimSpace(raw), nil
}

// nulEscape is how JSON spells the NUL character, which PostgreSQL stores in
// neither text nor jsonb: refused here with the JSON path at fault, instead
// of failing in SQL.
var nulEscape = []byte(`\u0000`)

// findNUL walks a valid JSON object and returns the path ("params.tags.1")
// of the first string holding NUL; a key holding NUL blames its object.
func findNUL(raw []byte) (string, bool) {
	type frame struct {
		array     bool
		index     int
		key       string
		expectKey bool
	}
	var stack []*frame
	path := func(n int) string {
		var parts []string
		for _, f := range stack[:n] {
			if f.array {
				parts = append(parts, strconv.Itoa(f.index))
			} else if !f.expectKey {
				parts = append(parts, f.key)
			}
		}
		if len(parts) == 0 {
			return "body"
		}
		return strings.Join(parts, ".")
	}
	// consumed moves the innermost container past the value just read.
	consumed := func() {
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.array {
			f.index++
		} else {
			f.expectKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{expectKey: true})
			case '[':
				stack = append(stack, &frame{array: true})
			default:
				stack = stack[:len(stack)-1]
				consumed()
			}
		case string:
			top := stack[len(stack)-1]
			if !top.array && top.expectKey {
				if strings.ContainsRune(v, 0) {
					return path(len(stack)), true
				}
				top.key, top.expectKey = v, false
				continue
			}
			if strings.ContainsRune(v, 0) {
				return path(len(stack)), true
			}
			consumed()
		default:
			consumed()
		}
	}
}

func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return events.Invalid("body", "malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return events.Invalid(field, "must be %s, not %s", jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return events.Invalid("body", "malformed JSON: unexpected end")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return events.Invalid(name, "unknown field")
	}
	return events.Invalid("body", "malformed JSON: %s", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "float64", "uint":
		return "a number"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return "a " + goKind
}

// pathID reads a UUID path parameter.
func pathID(c echo.Context, name string) (string, error) {
	return parseUUID(name, c.Param(name))
}

func parseUUID(field, s string) (string, error) {
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", events.Invalid(field, "must be a UUID like 0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a")
	}
	return id.String(), nil
}

// optionalUUID checks an optional UUID field of a body.
func optionalUUID(field string, s *string) (string, error) {
	if s == nil || *s == "" {
		return "", nil
	}
	return parseUUID(field, *s)
}
