package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/clawdbot/task-service/api"
)

// BenchmarkRequestValidation is what validating each request against the
// document at run time (kin-openapi's openapi3filter) would add to the
// lanes: a claim, one create, and a batch of 1,000 creates. Compare with
// the lanes' CPU per task (make bench) before choosing it (ADR 029).
func BenchmarkRequestValidation(b *testing.B) {
	raw, err := api.Document()
	if err != nil {
		b.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		b.Fatal(err)
	}
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		b.Fatal(err)
	}
	item := `{"title":"Crawl r/wallstreetbets for NVDA","task_type_id":"0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a","params":{"ticker":"NVDA","days":3},"priority":"high"}`
	items := strings.TrimSuffix(strings.Repeat(item+",", 1000), ",")
	cases := []struct{ name, method, path, body string }{
		{"claim", http.MethodPost, "/api/v1/worker/tasks/claim?wait=30", ""},
		{"create", http.MethodPost, "/api/v1/admin/workers/tasks", item},
		{"batch-1000", http.MethodPost, "/api/v1/admin/workers/tasks/batch", `{"tasks":[` + items + `]}`},
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				req := httptest.NewRequest(c.method, c.path, bytes.NewReader([]byte(c.body)))
				if c.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				route, params, err := router.FindRoute(req)
				if err != nil {
					b.Fatal(err)
				}
				err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
					Request: req, PathParams: params, Route: route, Options: opts})
				if err != nil {
					b.Fatal(fmt.Sprint(err))
				}
			}
		})
	}
	// The decode the handlers do today, for scale: the same batch body into
	// maps (encoding/json), without any check.
	b.Run("batch-1000-json-decode-only", func(b *testing.B) {
		body := []byte(`{"tasks":[` + items + `]}`)
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
