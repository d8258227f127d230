package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary bodies to the strict decoder with every request
// struct that carries free-form JSON. Whatever arrives, decoding must not
// panic and every error must classify as the client's fault (4xx): a 5xx
// would mean a body can make the server look broken. The seed corpus runs in
// plain `go test`; `make fuzz` explores further.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		``, ` `, `{}`, `null`, `[]`, `"x"`, `42`, `{`, `}`, `{"title":`, `{"title":"a"}{}`, `{} {}`, `{}x`,
		`{"title":"t","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","params":{"days":3},"priority":"high"}`,
		`{"title":1}`, `{"title":null}`, `{"params":[1,2]}`, `{"params":"str"}`, `{"assigned_to":123}`,
		`{"priority":{"a":1}}`, `{"unknown":true}`, `{"Title":"case"}`, `{"title":"a","title":"b"}`,
		`{"status":"completed"}`, `{"status":null,"reason":"x"}`, `{"status":["completed"]}`, `{"reason":7}`,
		`{"status":"idle","current_task_id":"not-a-uuid","metadata":{"pid":1}}`, `{"metadata":[1]}`,
		`{"current_task_id":null}`, `{"metadata":"\u0000"}`,
		`{"name":"report","param_schema":{"type":"object","required":["days"]},"max_retries":-1}`,
		`{"max_retries":1e400}`, `{"max_retries":1.5}`, `{"max_retries":"3"}`, `{"timeout_seconds":9223372036854775808}`,
		`{"name":"\ud800"}`, "{\"name\":\"\xff\xfe\"}", `{"sop":"` + strings.Repeat("a", 300) + `"}`,
		strings.Repeat("[", 20000), `{"params":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000) + `}`,
		"\ufeff{}", "{\"title\":\"a\"}\n", "{\"title\":\"a\"}\x00",
		`{"title":"a\u0000"}`, `{"params":{"k":["x","\u0000"]}}`, `{"params":{"\u0000":1}}`, `{"reason":"C:\\u0000"}`,
		`{"metadata":{"a":{"b":"\u0000"}}}`, `{"sop":"\\\u0000"}`, "{\"title\":\"a\x00\"}",
		`{"params":` + strings.Repeat(`[`, 65) + strings.Repeat(`]`, 65) + `}`, `{"title":"\udc00\ud800"}`, `{"title":"\ud83d\ude00"}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	targets := []struct {
		name string
		new  func() any
	}{
		{"createTaskRequest", func() any { return &createTaskRequest{} }},
		{"statusRequest", func() any { return &statusRequest{} }},
		{"heartbeatRequest", func() any { return &heartbeatRequest{} }},
		{"taskTypeRequest", func() any { return &taskTypeRequest{} }},
	}
	f.Fuzz(func(t *testing.T, body []byte, emptyOK bool) {
		for _, target := range targets {
			check := func(limited bool, err error) {
				if err == nil {
					return
				}
				status, eb := classify(err)
				if status < 400 || status > 499 {
					t.Fatalf("%s (limited=%v): body %q: error %v classifies as %d", target.name, limited, body, err, status)
				}
				if eb.Code == "" || eb.Message == "" {
					t.Fatalf("%s: body %q: error %v has an empty code or message: %+v", target.name, body, err, eb)
				}
			}
			v := target.new()
			err := decodeJSON(bytes.NewReader(body), v, emptyOK)
			check(false, err)
			if err == nil && holdsNUL(reflect.ValueOf(v)) {
				t.Fatalf("%s: body %q decoded with a NUL character inside: %+v", target.name, body, v)
			}
			if err == nil && firstLoneSurrogate(body) >= 0 {
				t.Fatalf("%s: body %q decoded with a lone surrogate inside", target.name, body)
			}
			if err == nil && checkDepth(body, 1, "") != nil {
				t.Fatalf("%s: body %q decoded with a value nested deeper than %d levels", target.name, body, MaxJSONDepth)
			}
			// Through a small body limit too, so the 413 path is fuzzed.
			limited := http.MaxBytesReader(nil, readCloser{bytes.NewReader(body)}, 64)
			err = decodeJSON(limited, target.new(), emptyOK)
			if len(body) > 64 && err == nil {
				t.Fatalf("%s: a %d-byte body passed a 64-byte limit", target.name, len(body))
			}
			if len(body) > 64 {
				if status, _ := classify(err); status != http.StatusRequestEntityTooLarge {
					t.Fatalf("%s: oversize body classified as %d, want 413", target.name, status)
				}
			}
			check(true, err)
		}
	})
}

// holdsNUL reports whether any string in v, including inside its raw JSON
// fields, holds the NUL character, which PostgreSQL cannot store.
func holdsNUL(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && holdsNUL(v.Elem())
	case reflect.String:
		return strings.ContainsRune(v.String(), 0)
	case reflect.Struct:
		for i := range v.NumField() {
			if holdsNUL(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice:
		if raw, ok := v.Interface().(json.RawMessage); ok {
			var x any
			return len(raw) > 0 && json.Unmarshal(raw, &x) == nil && anyHoldsNUL(x)
		}
		for i := range v.Len() {
			if holdsNUL(v.Index(i)) {
				return true
			}
		}
	}
	return false
}

func anyHoldsNUL(x any) bool {
	switch x := x.(type) {
	case string:
		return strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if anyHoldsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) || anyHoldsNUL(e) {
				return true
			}
		}
	}
	return false
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }
