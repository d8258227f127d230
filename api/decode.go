package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
)

// MaxBodyBytes bounds every request body but task data uploads (guardBody).
const MaxBodyBytes = 1 << 20

// decode reads exactly one JSON object into v, strictly: unknown fields,
// wrong types, trailing data and oversize bodies are errors naming what is
// at fault. An empty body is allowed when emptyOK (all fields optional).
func decode(c echo.Context, v any, emptyOK bool) error {
	raw, err := readAll(c.Request().Body)
	if err != nil {
		return err
	}
	return decodeRaw(raw, v, emptyOK)
}

// decodeJSON is decode without echo, for the fuzz target.
func decodeJSON(r io.Reader, v any, emptyOK bool) error {
	raw, err := readAll(r)
	if err != nil {
		return err
	}
	return decodeRaw(raw, v, emptyOK)
}

func decodeRaw(raw []byte, v any, emptyOK bool) error {
	if len(raw) == 0 {
		if emptyOK {
			return nil
		}
		return events.Invalid("body", "is empty; send a JSON object")
	}
	if raw[0] == '{' {
		if err := checkDepth(raw, envelopeOf(reflect.TypeOf(v)), ""); err != nil {
			return err
		}
	}
	if err := decodeStrict(raw, v); err != nil {
		return err
	}
	return checkJSON(raw, "")
}

// decodeStrict is decodeRaw without the depth bound and checkJSON, for a
// body whose parts are checked one by one (a batch, where a bad item fails
// alone; encoding/json bounds its own nesting).
func decodeStrict(raw []byte, v any) error {
	if len(raw) == 0 {
		return events.Invalid("body", "is empty; send a JSON object")
	}
	if raw[0] != '{' {
		return events.Invalid("body", "must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			typ.Field = withoutEmbedded(reflect.TypeOf(v), typ.Field)
		}
		return jsonError(err)
	}
	if dec.More() {
		return events.Invalid("body", "has data after the JSON object")
	}
	if err := refuseNulls(raw, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	return validateShape(v)
}

// refuseNulls names the first field sent as null where the document has no
// null: encoding/json would read it as absent and the request would pass
// as something it is not. Raw JSON fields (params, metadata) and types that
// decode themselves take null as they see fit.
func refuseNulls(raw []byte, t reflect.Type, path string) error {
	if !bytes.Contains(raw, []byte("null")) {
		return nil
	}
	if takesNull(t) {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	check := func(val json.RawMessage, t reflect.Type, at string) error {
		if string(val) == "null" && !takesNull(t) {
			return events.Invalid(at, "must not be null: leave it out instead")
		}
		return refuseNulls(val, t, at)
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		for name, val := range obj {
			if f, found := jsonField(t, name); found {
				if f.Type == rawType && string(val) == "null" && !rawTakesNull(f) {
					return events.Invalid(events.FieldPath(path, name), "must not be null: leave it out instead")
				}
				if err := check(val, f.Type, events.FieldPath(path, name)); err != nil {
					return err
				}
			}
		}
	case reflect.Slice:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, val := range items {
			if err := check(val, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// rawTakesNull says a raw JSON field of a request takes null: one tagged
// openapi:"any" (a result). The others are objects (params, a schema, a
// template), and the document says so (docGen.schema).
func rawTakesNull(f reflect.StructField) bool {
	return parseRules(f.Tag.Get("openapi"))["any"] != ""
}

// takesNull says a type decides about null itself: raw JSON (params,
// metadata) and types with their own UnmarshalJSON.
func takesNull(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == rawType || t == timeType || reflect.PointerTo(t).Implements(unmarshalerType)
}

// jsonField is the field of struct t that encoding/json fills from name
// (embedded structs flattened, names matched without case).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, embedded := jsonName(f)
		if ft := f.Type; embedded {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if inner, found := jsonField(ft, name); found {
				return inner, true
			}
			continue
		}
		if tag != "" && strings.EqualFold(tag, name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// jsonName is the name encoding/json gives field f in an object, "" when
// it writes none; embedded when f is a struct whose fields sit in the
// object instead.
func jsonName(f reflect.StructField) (name string, embedded bool) {
	tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	ft := f.Type
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	switch {
	case f.Anonymous && tag == "" && ft.Kind() == reflect.Struct:
		return "", true
	case tag == "-" || !f.IsExported():
		return "", false
	case tag == "":
		return f.Name, false
	}
	return tag, false
}

// readBody reads the request body (bounded by guardBody) without the white
// space around it.
func readBody(c echo.Context) ([]byte, error) {
	return readAll(c.Request().Body)
}

// readAll reads a bounded body; too large is a 413, too slow a 408.
func readAll(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, bodyError(err)
	}
	return bytes.TrimSpace(raw), nil
}

// withoutEmbedded drops from encoding/json's path of a field (dotted
// names) the Go names of the embedded structs it went through
// (ScheduleFields.interval is the client's interval).
func withoutEmbedded(t reflect.Type, path string) string {
	var out []string
	for _, seg := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			out, t = append(out, seg), nil
			continue
		}
		if f, ok := t.FieldByName(seg); ok && f.Anonymous {
			t = f.Type
			continue
		}
		out = append(out, seg)
		if f, ok := jsonField(t, seg); ok {
			t = f.Type
		} else {
			t = nil
		}
	}
	return strings.Join(out, ".")
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
		kind := jsonKind(typ.Type.Kind().String())
		if number, ok := strings.CutPrefix(typ.Value, "number "); ok && kind == "a number" {
			// A number that does not fit the field's type, or a fraction for a
			// whole number: not "must be a number, not number".
			return events.Invalid(field, "is out of range or not a whole number: %s", cutString(number, 64))
		}
		return events.Invalid(field, "must be %s, not %s", kind, typ.Value)
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

// optionalTimestamp checks an optional RFC 3339 field of a body.
func optionalTimestamp(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := events.ParseTimestamp(field, *s)
	if err != nil {
		return nil, err
	}
	return &t, nil
}
