package api

import (
	"regexp"
	"strings"
)

// Examples give generated docs and fuzzers a valid request and answer to
// start from. Each is made from its operation's schema, so it cannot drift
// from it, with values named after the field where a reader learns more
// from "NVDA" than from "string". The document's validation (kin-openapi,
// TestOpenAPIDocument) checks every example against its schema.

// exampleValues are the values of fields by name, where the schema allows.
var exampleValues = map[string]any{
	"title":           "Crawl r/wallstreetbets for NVDA",
	"description":     "Posts and comments of the last 24 hours",
	"name":            "reddit_crawl",
	"label":           "Reddit crawl",
	"email":           "ada@example.com",
	"full_name":       "Ada Lovelace",
	"password":        "correct-horse-battery",
	"new_password":    "correct-horse-battery-2",
	"reason":          "the upstream API answered 429",
	"message":         "fetched 120 of 500 posts",
	"sop":             "1. Fetch the posts. 2. Save them as posts.jsonl. 3. Report the count.",
	"ref":             "crawl",
	"key":             "NVDA",
	"cron":            "0 9 * * 1-5",
	"time_zone":       "Europe/Berlin",
	"unique_key":      "reddit:NVDA:2026-11-26",
	"data_type":       "posts",
	"filename":        "nvda.jsonl",
	"max_age":         "6h",
	"token":           "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3b3JrZXIifQ.c2lnbmF0dXJl",
	"model":           "claude-sonnet-4-5",
	"title_template":  "Crawl Reddit for {{key}}",
	"failure_reason":  "the upstream API answered 429",
	"unique_for":      "24h",
	"per":             "1m",
	"concurrency_key": "$.ticker",
	"status":          "failed", // where it may be: a finish's example carries a failure kind
	"sha256":          "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}

// exampleLeavesOut are optional fields an example leaves out: a cursor
// only a list hands out, and an interval where a cron expression says the
// same (a schedule takes one of them).
var exampleLeavesOut = map[string]bool{"after": true, "interval": true}

// isIDName says a field holds ids (a task's, a worker's), UUIDs all.
func isIDName(name string) bool {
	return name == "id" || strings.HasSuffix(name, "_id") || name == "depends_on" || name == "assigned_to" || name == "created_by"
}

const (
	exampleUUID  = "0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a"
	exampleTime  = "2026-11-26T09:00:00Z"
	exampleLater = "2026-12-31T18:00:00Z" // an end after every start
)

// addExamples puts an example beside every JSON request body and every
// JSON success answer.
func addExamples(paths map[string]map[string]any, schemas map[string]any) {
	ex := exampler{schemas: schemas}
	for _, ops := range paths {
		for _, raw := range ops {
			op := raw.(map[string]any)
			if body, has := op["requestBody"].(map[string]any); has {
				ex.annotate(body["content"])
			}
			for status, raw := range op["responses"].(map[string]any) {
				if resp, isInline := raw.(map[string]any); isInline && strings.HasPrefix(status, "2") {
					ex.annotate(resp["content"])
				}
			}
		}
	}
}

type exampler struct {
	schemas map[string]any
	depth   int
}

func (e exampler) annotate(content any) {
	media, _ := content.(map[string]any)
	if mt, has := media["application/json"].(map[string]any); has {
		if v, found := e.value("", mt["schema"]); found {
			mt["example"] = v
		}
	}
}

// value is an example of schema s for a field named name; found is false
// when none could be made (a pattern no candidate matches).
func (e exampler) value(name string, raw any) (any, bool) {
	s, _ := raw.(map[string]any)
	if ref, isRef := s["$ref"].(string); isRef {
		if e.depth > 6 {
			return nil, false
		}
		e.depth++
		return e.value(name, e.schemas[strings.TrimPrefix(ref, "#/components/schemas/")])
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, has := s[key].([]any); has && len(alts) > 0 {
			return e.value(name, alts[0])
		}
	}
	if vals, isEnum := s["enum"].([]any); isEnum {
		for _, v := range vals {
			if v == exampleValues[name] {
				return v, true
			}
		}
		return vals[0], vals[0] != nil
	}
	if vals, isEnum := s["enum"].([]string); isEnum {
		for _, v := range vals {
			if v == exampleValues[name] {
				return v, true
			}
		}
		return vals[0], true
	}
	switch s["type"] {
	case "object":
		return e.object(s)
	case "array":
		item, found := e.value(strings.TrimSuffix(name, "s"), s["items"])
		if !found {
			return []any{}, intOf(s["minItems"]) == 0
		}
		return []any{item}, true
	case "integer":
		return clamp(1, s), true
	case "number":
		return float64(clamp(1, s)), true
	case "boolean":
		return true, true
	case "string":
		return e.text(name, s)
	}
	return map[string]any{}, true
}

func (e exampler) object(s map[string]any) (any, bool) {
	props, _ := s["properties"].(map[string]any)
	out := map[string]any{}
	for name, p := range props {
		if exampleLeavesOut[name] && !isRequired(s, name) {
			continue
		}
		if v, found := e.value(name, p); found {
			out[name] = v
		} else if isRequired(s, name) {
			return nil, false
		}
	}
	return out, true
}

func (e exampler) text(name string, s map[string]any) (any, bool) {
	switch s["format"] {
	case "uuid":
		return exampleUUID, true
	case "date-time":
		if name == "end_at" {
			return exampleLater, true
		}
		return exampleTime, true
	case "email":
		return "ada@example.com", true
	case "binary":
		return nil, false
	}
	candidates := []string{"example"}
	if isIDName(name) {
		candidates = []string{exampleUUID, "example"}
	}
	if v, named := exampleValues[name].(string); named {
		candidates = []string{v, "example"}
	}
	for _, c := range candidates {
		if fits(c, s) {
			return c, true
		}
	}
	return nil, false
}

func fits(v string, s map[string]any) bool {
	if n := intOf(s["minLength"]); len(v) < n {
		return false
	}
	if n, has := s["maxLength"]; has && len(v) > intOf(n) {
		return false
	}
	if p, has := s["pattern"].(string); has {
		re, err := regexp.Compile(p)
		return err == nil && re.MatchString(v)
	}
	return true
}

func isRequired(s map[string]any, name string) bool {
	req, _ := s["required"].([]string)
	for _, r := range req {
		if r == name {
			return true
		}
	}
	return false
}

func clamp(v int, s map[string]any) int {
	if lo, has := s["minimum"]; has && v < intOf(lo) {
		v = intOf(lo)
	}
	if hi, has := s["maximum"]; has && v > intOf(hi) {
		v = intOf(hi)
	}
	return v
}

func intOf(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return 0
}
