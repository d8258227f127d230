package api

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/clawdbot/task-service/events"
)

// checkJSON refuses, naming the JSON path ("params.tags.1", under root
// when root is not ""), what encoding/json accepts but nobody downstream
// can hold faithfully:
//   - invalid UTF-8 (encoding/json would replace it with U+FFFD);
//   - a lone UTF-16 surrogate escape such as \ud800 (replaced the same way
//     in a string, refused by PostgreSQL in jsonb);
//   - a key given twice in one object (encoding/json keeps the last);
//   - the NUL character, which PostgreSQL stores in neither text nor jsonb;
//   - a number beyond float64 (1e400) or an integer literal beyond int64
//     (a 30-digit id), which a worker could not read back as written.
//
// raw is one valid JSON value.
func checkJSON(raw []byte, root string) error {
	badUTF8 := -1
	if !utf8.Valid(raw) {
		badUTF8 = firstInvalidUTF8(raw)
	}
	lone := firstLoneSurrogate(raw)
	type frame struct {
		array     bool
		index     int
		key       string
		expectKey bool
		keys      map[string]bool
	}
	var stack []*frame
	path := func() string {
		var parts []string
		for _, f := range stack {
			if f.array {
				parts = append(parts, strconv.Itoa(f.index))
			} else if !f.expectKey {
				parts = append(parts, f.key)
			}
		}
		if root != "" {
			parts = append([]string{root}, parts...)
		}
		if len(parts) == 0 {
			return "body"
		}
		return strings.Join(parts, ".")
	}
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
			return nil // the end (the caller already decoded it once)
		}
		if badUTF8 >= 0 && dec.InputOffset() > int64(badUTF8) {
			return events.Invalid(path(), "is not valid UTF-8")
		}
		if lone >= 0 && dec.InputOffset() > int64(lone) {
			return events.Invalid(path(), "has a lone UTF-16 surrogate (%s) that no text can hold; escape a character above U+FFFF as a pair", raw[lone:lone+6])
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{expectKey: true, keys: map[string]bool{}})
			case '[':
				stack = append(stack, &frame{array: true})
			default:
				stack = stack[:len(stack)-1]
				consumed()
			}
		case string:
			if len(stack) == 0 { // the value is one string
				if strings.ContainsRune(v, 0) {
					return events.Invalid(path(), "must not contain the NUL character (\\u0000)")
				}
				continue
			}
			top := stack[len(stack)-1]
			if !top.array && top.expectKey {
				if strings.ContainsRune(v, 0) { // blame the object: the key cannot be shown
					return events.Invalid(path(), "a key must not contain the NUL character (\\u0000)")
				}
				top.key, top.expectKey = v, false
				if top.keys[v] {
					return events.Invalid(path(), "is given twice in the same object")
				}
				top.keys[v] = true
				continue
			}
			if strings.ContainsRune(v, 0) {
				return events.Invalid(path(), "must not contain the NUL character (\\u0000)")
			}
			consumed()
		case json.Number:
			if err := checkNumber(string(v)); err != nil {
				return events.Invalid(path(), "%s", err.Error())
			}
			consumed()
		default:
			consumed()
		}
	}
}

type numberError string

func (e numberError) Error() string { return string(e) }

func checkNumber(n string) error {
	if !strings.ContainsAny(n, ".eE") {
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return numberError("is an integer beyond 64 bits (at most 9223372036854775807 in size); send it as a string")
		}
		return nil
	}
	if f, err := strconv.ParseFloat(n, 64); err != nil || math.IsInf(f, 0) {
		return numberError("is a number beyond what a 64-bit float holds")
	}
	return nil
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// firstLoneSurrogate is the offset of the first \uXXXX escape in raw that
// is half of a UTF-16 pair without its other half, or -1. Outside strings
// valid JSON has no backslash, and each backslash starts an escape, so
// stepping from escape to escape never mistakes text ("\\ud800") for one.
func firstLoneSurrogate(raw []byte) int {
	for i := bytes.IndexByte(raw, '\\'); i >= 0 && i+1 < len(raw); {
		next := i + 2
		if raw[i+1] == 'u' {
			next = i + 6
			switch r := hex4(raw, i+2); {
			case r >= 0xD800 && r < 0xDC00: // high: its low half must follow
				if low := hex4(raw, i+8); i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' && low >= 0xDC00 && low < 0xE000 {
					next = i + 12
				} else {
					return i
				}
			case r >= 0xDC00 && r < 0xE000:
				return i
			}
		}
		if next >= len(raw) {
			break
		}
		j := bytes.IndexByte(raw[next:], '\\')
		if j < 0 {
			break
		}
		i = next + j
	}
	return -1
}

// hex4 reads the four hex digits at raw[i:], or -1.
func hex4(raw []byte, i int) int {
	if i+4 > len(raw) {
		return -1
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// MaxJSONDepth bounds how deeply a JSON value a client sends may nest
// (results, params, metadata, schemas). encoding/json takes 10,000
// levels, and every later reader pays for depth: the schema validator and
// jsonb recurse, and a page that indents the value writes a line per level
// whose indentation grows with it. Real documents need a handful.
const MaxJSONDepth = 64

// CheckJSON checks raw, one JSON value a client sent outside a JSON body
// (a form field of the admin UI), as strictly as a body's free-form
// fields are checked: the depth bound and checkJSON's refusals, naming
// field.
func CheckJSON(field string, raw []byte) error {
	if err := checkDepth(raw, 0, field); err != nil {
		return err
	}
	if !json.Valid(raw) {
		return events.Invalid(field, "is not valid JSON")
	}
	return checkJSON(raw, field)
}

// depthStep is one level of a body's envelope while checkDepth scans it.
type depthStep struct {
	array     bool
	index     int
	key       []byte // the raw key, quotes included
	expectKey bool
}

// checkDepth refuses raw, in one pass over its bytes before anything
// parses it, when a value in it nests more than MaxJSONDepth levels below
// the envelope: the body's own first levels of containers (1 for an
// object of fields, 2 for a schedule's task.params or a list of objects;
// see envelopeOf). The error names the field at the envelope's depth
// ("result", "task.params", "[3].result"), under root. Malformed JSON is
// left to the decoder.
func checkDepth(raw []byte, envelope int, root string) error {
	limit := envelope + MaxJSONDepth
	steps := make([]depthStep, 0, envelope)
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			end := stringEnd(raw, i)
			if depth > 0 && depth <= envelope {
				if top := &steps[depth-1]; !top.array && top.expectKey {
					top.key, top.expectKey = raw[i:end+1], false
				}
			}
			i = end
		case '{', '[':
			depth++
			if depth > limit {
				return events.Invalid(stepsName(root, steps), "nests deeper than %d levels", MaxJSONDepth)
			}
			if depth <= envelope {
				steps = append(steps[:depth-1], depthStep{array: raw[i] == '[', expectKey: raw[i] == '{'})
			}
		case '}', ']':
			depth = max(depth-1, 0)
		case ',':
			if depth > 0 && depth <= envelope {
				if top := &steps[depth-1]; top.array {
					top.index++
				} else {
					top.expectKey = true
				}
			}
		}
	}
	return nil
}

// stringEnd is the offset of the quote that ends the string starting at
// raw[start], or the last offset when it never ends.
func stringEnd(raw []byte, start int) int {
	for i := start + 1; i < len(raw); {
		j := bytes.IndexAny(raw[i:], `"\`)
		if j < 0 {
			break
		}
		if raw[i+j] == '"' {
			return i + j
		}
		i += j + 2 // the backslash and the character it escapes
	}
	return len(raw) - 1
}

// stepsName is the field the envelope's steps lead to, in the API's
// spelling: "task.params", "[3].result".
func stepsName(root string, steps []depthStep) string {
	name := root
	for _, s := range steps {
		switch {
		case s.array && name == "":
			name = "[" + strconv.Itoa(s.index) + "]"
		case s.array:
			name += "." + strconv.Itoa(s.index)
		default:
			var key string
			if json.Unmarshal(s.key, &key) != nil {
				key = string(s.key)
			}
			if name != "" {
				name += "."
			}
			name += key
		}
	}
	if name == "" {
		return "body"
	}
	return name
}

// envelopes caches envelopeOf by type.
var envelopes sync.Map

// envelopeOf is how many levels of containers a body decoded into a value
// of type t has above its deepest free-form field (json.RawMessage, any,
// or a type that decodes itself): the request's own structure, which the
// depth bound does not count.
func envelopeOf(t reflect.Type) int {
	if n, ok := envelopes.Load(t); ok {
		return n.(int)
	}
	n := structureDepth(t, 0)
	envelopes.Store(t, n)
	return n
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func structureDepth(t reflect.Type, nested int) int {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if nested > 8 || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType) {
		return 0
	}
	switch t.Kind() {
	case reflect.Struct:
		d := 0
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			fd := structureDepth(f.Type, nested+1)
			if f.Anonymous && fd > 0 { // an embedded struct's fields sit in this object
				fd--
			}
			d = max(d, fd)
		}
		return 1 + d
	case reflect.Slice, reflect.Array, reflect.Map:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return 0 // base64 text
		}
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String && !reflect.PointerTo(t.Elem()).Implements(unmarshalerType) {
			return 0 // a list of ids or names holds no free-form field
		}
		return 1 + structureDepth(t.Elem(), nested+1)
	}
	return 0
}
