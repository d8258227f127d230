package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/reference"
	"github.com/clawdbot/task-service/store/blob/s3test"
)

// validated counts, over the whole package run, the answers of each
// operation that were checked against the document (every setup serves
// through apitest).
var validated = struct {
	sync.Mutex
	doc []byte // the document, as the first setup served it
	ops map[string]int
}{ops: map[string]int{}}

func recordValidated(doc []byte, c *apitest.Contract) {
	validated.Lock()
	defer validated.Unlock()
	validated.doc = doc
	for op, n := range c.Checked() {
		validated.ops[op] += n
	}
}

// checked wraps srv's handler so that every answer is validated against
// the document srv serves. Call it before starting the test server: its
// check runs at cleanup, after the server closed and every handler returned.
func checked(t *testing.T, srv *api.Server) (*apitest.Contract, http.Handler) {
	t.Helper()
	doc, err := json.Marshal(srv.OpenAPI())
	require.NoError(t, err)
	contract := apitest.New(t, doc)
	t.Cleanup(func() { recordValidated(doc, contract) })
	return contract, contract.Handler(srv.Handler())
}

// TestMain fails a full run of the package when a documented operation
// had no answer validated: every route needs a test that calls it.
func TestMain(m *testing.M) {
	code := m.Run()
	s3test.Stop() // the S3 server of the task data tests, if one started
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		if missing := unexercised(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test of package api called these operations, so their answers were never checked against the OpenAPI document: %s\n",
				strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

func unexercised() []string {
	validated.Lock()
	defer validated.Unlock()
	var missing []string
	for _, op := range documentOps(validated.doc) {
		if validated.ops[op] == 0 {
			missing = append(missing, op)
		}
	}
	return missing
}

// documentOps lists the operationIds of the document.
func documentOps(raw []byte) []string {
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		panic(err)
	}
	var ops []string
	for _, methods := range doc.Paths {
		for _, op := range methods {
			ops = append(ops, op.OperationID)
		}
	}
	sort.Strings(ops)
	return ops
}

// TestOpenAPIDocument checks what the document says about each operation:
// a success answer with a schema, the errors its inputs imply, typed query
// parameters, and that kin-openapi accepts it as a valid OpenAPI 3 document.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(setup(t).srv.OpenAPI())
	require.NoError(t, err)
	_, err = apitest.Load(raw)
	require.NoError(t, err, "the document must be valid OpenAPI")

	var doc struct {
		Servers []any `json:"servers"`
		Tags    []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"tags"`
		Paths map[string]map[string]struct {
			OperationID string              `json:"operationId"`
			Tags        []string            `json:"tags"`
			Security    *[]any              `json:"security"`
			Parameters  []map[string]any    `json:"parameters"`
			RequestBody map[string]any      `json:"requestBody"`
			Responses   map[string]response `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotEmpty(t, doc.Servers)
	for _, tag := range doc.Tags {
		require.NotEmpty(t, tag.Description, "tag %s needs a line in tagDocs (api/openapi.go)", tag.Name)
	}
	for _, name := range []string{"Task", "TaskType", "User", "WorkerView", "TaskWithType", "Attempt", "TaskListPage", "TaskAnswer", "Assignment", "AssignAnswer", "Stats", "Capacity", "EventPage", "Chain", "StreamToken", "HeartbeatView", "ErrorCode", "Error"} {
		require.Contains(t, doc.Components.Schemas, name)
	}
	ids := map[string]string{}
	for path, methods := range doc.Paths {
		for method, op := range methods {
			name := strings.ToUpper(method) + " " + path
			t.Run(name, func(t *testing.T) {
				require.NotEmpty(t, op.OperationID, "operationId (route id)")
				require.NotContains(t, ids, op.OperationID, "operationId also used by %s", ids[op.OperationID])
				ids[op.OperationID] = name
				require.Len(t, op.Tags, 1)
				var success []string
				for status, r := range op.Responses {
					// 206: a Range of a download, beside its 200; 200: a
					// creation that found its thing there, beside its 201.
					if status[0] == '2' && status != "206" && !(status == "200" && hasStatus(op.Responses, "201")) {
						success = append(success, status)
						require.NotEmpty(t, r.Content, "%s answers %s without a body: set response (or media) in routes.go", name, status)
					}
				}
				require.Len(t, success, 1, "exactly one success status (route status)")
				require.Contains(t, op.Responses, "500")
				if op.Security == nil || len(*op.Security) > 0 {
					require.Contains(t, op.Responses, "401", "a route behind a login answers 401")
				}
				if strings.Contains(path, "{") {
					require.Contains(t, op.Responses, "400", "a path parameter can be malformed: list 400 in errors")
					require.Contains(t, op.Responses, "404", "a path parameter can name nothing: list 404 in errors")
				}
				if op.RequestBody != nil {
					require.Contains(t, op.Responses, "400", "a body can be invalid: list 400 in errors")
				}
				for _, p := range op.Parameters {
					if p["in"] == "query" {
						require.Contains(t, op.Responses, "400", "a query parameter can be invalid: list 400 in errors")
						require.NotEmpty(t, p["description"], "query parameter %v needs a description", p["name"])
					}
				}
			})
		}
	}
}

type response struct {
	Ref     string         `json:"$ref"`
	Content map[string]any `json:"content"`
}

func TestEveryAnswerIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := b.http.Get(b.url + "/api/v1/admin/workers/stats")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, 1, b.contract.Checked()["getStats"], "the API tests' server validates each answer")

	// An answer the document does not allow is caught: a 200 from a route
	// that documents only 201, and a body with a field no schema names.
	raw, err := json.Marshal(b.srv.OpenAPI())
	require.NoError(t, err)
	c, err := apitest.Load(raw)
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodPost, b.url+"/api/v1/admin/workers", nil)
	c.Check(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, []byte(`{"success":true,"data":{}}`))
	req, _ = http.NewRequest(http.MethodGet, b.url+"/api/v1/admin/workers/stats", nil)
	c.Check(req, http.StatusNotFound, http.Header{"Content-Type": {"application/json"}}, []byte(`{"success":false,"data":null,"error":{"code":"not_found","message":"x"}}`))
	req, _ = http.NewRequest(http.MethodGet, b.url+"/healthz", nil)
	c.Check(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, []byte(`{"success":true,"data":{"status":"ok"},"extra":1}`))
	require.Len(t, c.Failures(), 3, "%q", c.Failures())
}

func TestAPIReferencePage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := b.http.Get(b.url + "/api/docs")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", "nothing from a CDN")
	require.Contains(t, string(page), `<redoc spec-url="/api/v1/openapi.json"`)
	require.NotContains(t, string(page), "https://", "every resource comes from this server")

	// The bundle, gzipped for browsers (Go's client asks for gzip itself
	// and unpacks it; ask explicitly to see the wire size).
	// The script, as the page asks for it.
	src := regexp.MustCompile(`<script src="([^"]+)"`).FindStringSubmatch(string(page))
	require.NotNil(t, src)
	req, _ := http.NewRequest(http.MethodGet, b.url+src[1], nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = b.http.Do(req)
	require.NoError(t, err)
	wire, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
	require.Less(t, len(wire), 400<<10, "the reference page costs under 400 KiB on the wire")
	zr, err := gzip.NewReader(bytes.NewReader(wire))
	require.NoError(t, err)
	js, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Contains(t, string(js), "Redoc")

	req, _ = http.NewRequest(http.MethodGet, b.url+reference.ScriptPath, nil)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err = b.http.Do(req)
	require.NoError(t, err)
	plain, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Empty(t, resp.Header.Get("Content-Encoding"))
	require.Equal(t, js, plain)
}

func hasStatus[R any](responses map[string]R, status string) bool {
	_, ok := responses[status]
	return ok
}
