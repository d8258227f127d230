// Package apitest checks, in tests, that every answer of the API is one its
// OpenAPI document allows: status, headers and body. The API tests serve
// through Contract.Handler; the binaries' tests call through
// Contract.Transport. Production code never imports it.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Contract validates answers against one OpenAPI document.
type Contract struct {
	router routers.Router

	mu       sync.Mutex
	failures []string
	seen     map[string]bool // operation and status already reported
	checked  map[string]int  // operationId -> answers validated
}

// Load parses the document (JSON) and prepares its router.
func Load(doc []byte) (*Contract, error) {
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("apitest: load the document: %w", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("apitest: the document is invalid: %w", err)
	}
	d.Servers = nil // match any host: tests serve on random ports
	r, err := legacy.NewRouter(d)
	if err != nil {
		return nil, fmt.Errorf("apitest: route the document: %w", err)
	}
	return &Contract{router: r, checked: map[string]int{}, seen: map[string]bool{}}, nil
}

// New is Load that fails t on error, and reports at t's cleanup every answer
// that broke the contract. Call it before starting the server, so its
// cleanup runs after the server has closed (and every handler returned).
func New(t testing.TB, doc []byte) *Contract {
	t.Helper()
	c, err := Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, f := range c.Failures() {
			t.Errorf("answer outside the OpenAPI document: %s", f)
		}
	})
	return c
}

// Failures are the violations seen so far.
func (c *Contract) Failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.failures...)
}

// Checked counts the answers validated per operationId.
func (c *Contract) Checked() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.checked))
	for k, v := range c.checked {
		out[k] = v
	}
	return out
}

// Check validates one answer to req. A request to a path the document does
// not name, and a client that hung up (499), are not checked.
func (c *Contract) Check(req *http.Request, status int, header http.Header, body []byte) {
	if status == 499 {
		return
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return // unknown paths and methods: echo's 404/405, not an operation
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") && status < 300 {
		// A stream or a page: its media type is checked, not its body.
		in.Options.ExcludeResponseBody = true
		if op := route.Operation.Responses.Status(status); op == nil || op.Value.Content.Get(mediaOf(ct)) == nil {
			c.fail(fmt.Sprintf("%s %s: %d with Content-Type %q, which the document does not list", req.Method, req.URL.Path, status, ct))
			return
		}
	}
	err = openapi3filter.ValidateResponse(req.Context(), in)
	c.mu.Lock()
	c.checked[route.Operation.OperationID]++
	c.mu.Unlock()
	if err != nil {
		key := fmt.Sprintf("%s %d", route.Operation.OperationID, status)
		c.mu.Lock()
		repeated := c.seen[key]
		c.seen[key] = true
		c.mu.Unlock()
		if !repeated { // one report per operation and status keeps the log readable
			c.fail(fmt.Sprintf("%s %s -> %d %s: %v", req.Method, req.URL.RequestURI(), status, clip(body), err))
		}
	}
}

func (c *Contract) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, msg)
}

func mediaOf(contentType string) string {
	m, _, _ := strings.Cut(contentType, ";")
	return strings.TrimSpace(m)
}

func clip(body []byte) string {
	if len(body) > 300 {
		return string(body[:300]) + "..."
	}
	return string(body)
}

// Handler serves h and checks each answer it writes.
func (c *Contract) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		// The validator needs the request as the client sent it, with a
		// context that outlives the handler.
		req := r.Clone(context.WithoutCancel(r.Context()))
		h.ServeHTTP(rec, r)
		if r.Method == http.MethodHead {
			return
		}
		c.Check(req, rec.status, rec.Header().Clone(), rec.body.Bytes())
	})
}

// maxRecorded bounds what a recorder keeps of a body (streams run long).
const maxRecorded = 4 << 20

// recorder passes an answer through and keeps its status and body.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = status, true
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	if r.body.Len()+len(p) <= maxRecorded {
		r.body.Write(p)
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Transport checks each answer a client receives (the tests of the
// binaries, which run the server in another process).
func (c *Contract) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		var reqBody []byte
		if req.Body != nil && req.GetBody != nil {
			if b, err := req.GetBody(); err == nil {
				reqBody, _ = io.ReadAll(b)
			}
		}
		resp, err := next.RoundTrip(req)
		if err != nil || req.Method == http.MethodHead {
			return resp, err
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			c.Check(req, resp.StatusCode, resp.Header, nil)
			return resp, nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return resp, nil // the caller sees the short body and fails its own way
		}
		checked := req.Clone(context.WithoutCancel(req.Context()))
		checked.Body = io.NopCloser(bytes.NewReader(reqBody))
		c.Check(checked, resp.StatusCode, resp.Header, body)
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
