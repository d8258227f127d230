package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

// contractOp is one operation of the document with a JSON request body.
type contractOp struct {
	method, path, role string
	schema             map[string]any
	example            any
}

// documentedOps reads the operations with a JSON body from the document.
func documentedOps(t *testing.T) []contractOp {
	raw, err := api.Document()
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			Description string `json:"description"`
			RequestBody struct {
				Content map[string]struct {
					Schema  map[string]any `json:"schema"`
					Example any            `json:"example"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var ops []contractOp
	for path, methods := range doc.Paths {
		for method, op := range methods {
			mt, has := op.RequestBody.Content["application/json"]
			if !has {
				continue
			}
			role := ""
			switch {
			case strings.Contains(op.Description, "admin role"):
				role = "admin"
			case strings.Contains(op.Description, "worker role"):
				role = "worker"
			}
			ops = append(ops, contractOp{method: strings.ToUpper(method), path: strings.ReplaceAll(path, "{id}", "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a"),
				role: role, schema: mt.Schema, example: mt.Example})
		}
	}
	// A password change ends every token of its user: last.
	sort.Slice(ops, func(i, j int) bool {
		pi, pj := strings.HasSuffix(ops[i].path, "/auth/password"), strings.HasSuffix(ops[j].path, "/auth/password")
		if pi != pj {
			return pj
		}
		return ops[i].method+ops[i].path < ops[j].method+ops[j].path
	})
	return ops
}

// The document's own examples are requests it allows: the server may
// refuse them for state (404 for an id that is not there, 422, 409), never
// for their shape (400 validation_failed), and never with a 5xx. And each
// request that drops a required field is refused with a 4xx.
func TestDocumentedRequestsAreNotRefusedForShape(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.newWorker(t, "Contract", 1)
	tokens := map[string]string{"admin": b.admin.Token(), "worker": w.Token()}
	send := func(op contractOp, body any) (int, string) {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(b.ctx, op.method, b.url+op.path, bytes.NewReader(raw))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if tok := tokens[op.role]; tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := b.http.Do(req)
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(out)
	}
	var findings []string
	for _, op := range documentedOps(t) {
		if op.role == "" {
			continue // login, the Telegram webhook: their own tests
		}
		status, body := send(op, op.example)
		switch {
		case status >= 500:
			findings = append(findings, fmt.Sprintf("%s %s: the example got %d %.200s", op.method, op.path, status, body))
		case status == http.StatusBadRequest && strings.Contains(body, `"validation_failed"`):
			findings = append(findings, fmt.Sprintf("%s %s: the example was refused for its shape: %.300s", op.method, op.path, body))
		}
		obj, isObject := op.example.(map[string]any)
		req, _ := op.schema["required"].([]any)
		for _, name := range req {
			if !isObject {
				break
			}
			without := map[string]any{}
			for k, v := range obj {
				if k != name {
					without[k] = v
				}
			}
			if status, body := send(op, without); status < 400 || status >= 500 {
				findings = append(findings, fmt.Sprintf("%s %s without %s: %d %.200s", op.method, op.path, name, status, body))
			}
		}
	}
	sort.Strings(findings)
	require.Empty(t, findings, strings.Join(findings, "\n"))
}
