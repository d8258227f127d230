package api_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

// The rules client generators trip on, Python's openapi-python-client
// first: a nullable enum whose values lack null (ValueError on every
// read of a task not failed), allOf beside nullable (TypeError on an empty
// claim), and */* media types (bodies dropped). Each finding names where.
func TestDocumentFollowsTheGeneratorsRules(t *testing.T) {
	raw, err := api.Document()
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal(raw, &doc))
	var findings []string
	var walk func(node any, at string)
	walk = func(node any, at string) {
		switch n := node.(type) {
		case map[string]any:
			if n["nullable"] == true {
				if vals, isEnum := n["enum"].([]any); isEnum && !containsNil(vals) {
					findings = append(findings, at+": a nullable enum without null among its values")
				}
				if _, has := n["allOf"]; has {
					findings = append(findings, at+": allOf beside nullable (use anyOf)")
				}
			}
			for k, v := range n {
				if k == "*/*" {
					findings = append(findings, at+": media type */* (name the real ones)")
				}
				walk(v, at+"/"+k)
			}
		case []any:
			for i, v := range n {
				walk(v, fmt.Sprintf("%s/%d", at, i))
			}
		}
	}
	walk(doc, "#")
	sort.Strings(findings)
	require.Empty(t, findings, strings.Join(findings, "\n"))
}

func containsNil(vals []any) bool {
	for _, v := range vals {
		if v == nil {
			return true
		}
	}
	return false
}

// Redocly's no-ambiguous-paths is off (api/redocly.yaml) for the seed's
// paths, where a static segment sits beside a parameter one level up and
// the server picks the static route (methodTable). This keeps the list of
// such pairs exactly the seed's, so a new ambiguity fails here instead.
func TestOnlyTheSeedsPathsAreAmbiguous(t *testing.T) {
	raw, err := api.Document()
	require.NoError(t, err)
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var paths []string
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var ambiguous []string
	for i, a := range paths {
		for _, b := range paths[i+1:] {
			if ambiguousPaths(a, b) {
				ambiguous = append(ambiguous, a+" ~ "+b)
			}
		}
	}
	require.Equal(t, []string{
		"/api/v1/admin/workers/task-types/{id} ~ /api/v1/admin/workers/{id}/deactivate",
		"/api/v1/admin/workers/task-types/{id} ~ /api/v1/admin/workers/{id}/password",
		"/api/v1/admin/workers/task-types/{id} ~ /api/v1/admin/workers/{id}/reactivate",
		"/api/v1/admin/workers/tasks/{id} ~ /api/v1/admin/workers/{id}/deactivate",
		"/api/v1/admin/workers/tasks/{id} ~ /api/v1/admin/workers/{id}/password",
		"/api/v1/admin/workers/tasks/{id} ~ /api/v1/admin/workers/{id}/reactivate",
		"/api/v1/admin/workers/workflows/{id} ~ /api/v1/admin/workers/{id}/deactivate",
		"/api/v1/admin/workers/workflows/{id} ~ /api/v1/admin/workers/{id}/password",
		"/api/v1/admin/workers/workflows/{id} ~ /api/v1/admin/workers/{id}/reactivate",
	}, ambiguous)
}

// ambiguousPaths is Redocly's rule: as many segments and as many
// parameters, and every segment equal where neither side is a parameter.
func ambiguousPaths(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	if len(as) != len(bs) || a == b {
		return false
	}
	aParams, bParams := 0, 0
	for i := range as {
		pa, pb := strings.HasPrefix(as[i], "{"), strings.HasPrefix(bs[i], "{")
		if pa {
			aParams++
		}
		if pb {
			bParams++
		}
		if !pa && !pb && as[i] != bs[i] {
			return false
		}
	}
	return aParams == bParams
}

// Every JSON request body and success answer carries an example (checked
// against its schema by the document's validation in TestOpenAPIDocument).
func TestEveryOperationHasExamples(t *testing.T) {
	raw, err := api.Document()
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody struct {
				Content map[string]map[string]any `json:"content"`
			} `json:"requestBody"`
			Responses map[string]struct {
				Content map[string]map[string]any `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var missing []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if mt, has := op.RequestBody.Content["application/json"]; has && mt["example"] == nil {
				missing = append(missing, method+" "+path+" request")
			}
			for status, resp := range op.Responses {
				if mt, has := resp.Content["application/json"]; has && strings.HasPrefix(status, "2") && mt["example"] == nil {
					missing = append(missing, method+" "+path+" "+status)
				}
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing)
}
