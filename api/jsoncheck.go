package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/clawdbot/task-service/events"
)

// checkJSON refuses, naming the JSON path ("params.tags.1"), what
// encoding/json accepts but nobody downstream can hold faithfully:
//   - invalid UTF-8 (encoding/json would replace it with U+FFFD);
//   - a key given twice in one object (encoding/json keeps the last);
//   - the NUL character, which PostgreSQL stores in neither text nor jsonb;
//   - a number beyond float64 (1e400) or an integer literal beyond int64
//     (a 30-digit id), which a worker could not read back as written.
//
// raw is one valid JSON object.
func checkJSON(raw []byte) error {
	badUTF8 := -1
	if !utf8.Valid(raw) {
		badUTF8 = firstInvalidUTF8(raw)
	}
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
