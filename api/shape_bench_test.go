package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkRequestValidationCompiled is the compiled shape validator
// beside BenchmarkRequestValidation's kin-openapi (ADR 029), on the same
// requests: what validateShape adds to a decoded body (shape), and the
// whole decode the handlers run with it (decode), for one create and for
// a batch of 1,000 (each item decoded and checked on its own, as
// createTasks does). A claim has no body: nothing to add.
func BenchmarkRequestValidationCompiled(b *testing.B) {
	item := `{"title":"Crawl r/wallstreetbets for NVDA","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","params":{"ticker":"NVDA","days":3},"priority":"high"}`
	var one createTaskRequest
	if err := decodeRaw([]byte(item), &one, false); err != nil {
		b.Fatal(err)
	}
	b.Run("create-shape", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := validateShape(&one); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("create-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(item)))
		for b.Loop() {
			var req createTaskRequest
			if err := decodeRaw([]byte(item), &req, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	batch := make([]createTaskRequest, 1000)
	for i := range batch {
		batch[i] = one
	}
	b.Run("batch-1000-shape", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range batch {
				if err := validateShape(&batch[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	body := []byte(`{"tasks":[` + strings.TrimSuffix(strings.Repeat(item+",", 1000), ",") + `]}`)
	b.Run("batch-1000-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var outer struct {
				Tasks *[]json.RawMessage `json:"tasks"`
			}
			if err := decodeStrict(body, &outer); err != nil {
				b.Fatal(err)
			}
			items := make([]createTaskRequest, len(*outer.Tasks))
			for i, el := range *outer.Tasks {
				if err := decodeRaw(el, &items[i], false); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
