package api_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/robfig/cron/v3"
)

// The document's extensions (ADR 029): rules JSON Schema cannot state,
// which the contract fuzz test applies after kin-openapi's validation, as
// the document's descriptions say:
//   - x-greater-than / x-at-least: a value compared with a sibling's
//     (a date-time or a number);
//   - x-unique-by: a list's items name a member's value once;
//   - x-duration-min / x-duration-max / x-whole-seconds: a duration's
//     bounds (format go-duration or days-or-go-duration);
//   - x-required-query-by-media-type: query parameters a body of that
//     media type needs.

// paramSchema is a parameter's schema, and whether its value is JSON text
// (content application/json).
func paramSchema(p *openapi3.Parameter) (*openapi3.Schema, bool) {
	if p.Schema != nil {
		return p.Schema.Value, false
	}
	return p.Content.Get("application/json").Schema.Value, true
}

func checkExtensions(op *openapi3.Operation, d drawn) error {
	if need, found := op.Extensions["x-required-query-by-media-type"].(map[string]any); found {
		names, _ := need[d.contentType].([]any)
		for _, n := range names {
			if d.query.Get(n.(string)) == "" {
				return fmt.Errorf("query %s is required with a body of %s", n, d.contentType)
			}
		}
	}
	for _, p := range op.Parameters {
		pv := p.Value
		if pv.In != "query" || !d.query.Has(pv.Name) {
			continue
		}
		s, asJSON := paramSchema(pv)
		var v any = d.query.Get(pv.Name)
		if asJSON {
			if json.Unmarshal([]byte(d.query.Get(pv.Name)), &v) != nil {
				return fmt.Errorf("query %s is not JSON", pv.Name)
			}
		}
		if err := walkExtensions(pv.Name, v, s); err != nil {
			return err
		}
	}
	if op.RequestBody != nil && d.body != nil {
		if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil {
			var v any
			if json.Unmarshal(d.body, &v) != nil {
				return fmt.Errorf("body is not JSON")
			}
			return walkExtensions("body", v, mt.Schema.Value)
		}
	}
	return nil
}

func walkExtensions(at string, v any, s *openapi3.Schema) error {
	if alts := append(append([]*openapi3.SchemaRef{}, s.AnyOf...), s.OneOf...); len(alts) == 1 {
		s = alts[0].Value
	}
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := s.Properties[k]
			if p == nil && s.AdditionalProperties.Schema != nil {
				p = s.AdditionalProperties.Schema
			}
			if p == nil {
				continue
			}
			for ext, cmp := range map[string]func(a, b float64) bool{
				"x-greater-than": func(a, b float64) bool { return a > b },
				"x-at-least":     func(a, b float64) bool { return a >= b },
			} {
				other, has := p.Value.Extensions[ext].(string)
				if !has || x[other] == nil {
					continue
				}
				a, aOK := comparable(val)
				b, bOK := comparable(x[other])
				if aOK && bOK && !cmp(a, b) {
					return fmt.Errorf("%s.%s: %s %s", at, k, ext, other)
				}
			}
			if err := walkExtensions(at+"."+k, val, p.Value); err != nil {
				return err
			}
		}
	case []any:
		if key, has := s.Extensions["x-unique-by"].(string); has {
			seen := map[string]bool{}
			for _, it := range x {
				if m, isObj := it.(map[string]any); isObj && m[key] != nil {
					k := fmt.Sprint(m[key])
					if seen[k] {
						return fmt.Errorf("%s: %s %s given twice", at, key, k)
					}
					seen[k] = true
				}
			}
		}
		if s.Items != nil {
			for i, it := range x {
				if err := walkExtensions(fmt.Sprintf("%s[%d]", at, i), it, s.Items.Value); err != nil {
					return err
				}
			}
		}
	case string:
		if s.Format == "go-duration" || s.Format == "days-or-go-duration" {
			if err := durationBounds(s, x); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		}
	}
	return nil
}

// comparable reads a number or a date-time as a number.
func comparable(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		t, err := time.Parse(time.RFC3339, x)
		return float64(t.UnixMicro()), err == nil
	}
	return 0, false
}

// durationBounds applies x-duration-min, x-duration-max and
// x-whole-seconds to a duration of schema s.
func durationBounds(s *openapi3.Schema, text string) error {
	d, err := parseDaysOrDuration(text)
	if err != nil {
		return nil // the format's to say
	}
	if lo, has := s.Extensions["x-duration-min"].(string); has {
		if min, _ := time.ParseDuration(lo); d < min {
			return fmt.Errorf("%s is below %s", text, lo)
		}
	}
	if hi, has := s.Extensions["x-duration-max"].(string); has {
		if max, _ := time.ParseDuration(hi); d > max {
			return fmt.Errorf("%s is above %s", text, hi)
		}
	}
	if whole, _ := s.Extensions["x-whole-seconds"].(bool); whole && d%time.Second != 0 {
		return fmt.Errorf("%s is not whole seconds", text)
	}
	return nil
}

// parseDaysOrDuration reads whole days (30d) or a Go duration.
func parseDaysOrDuration(s string) (time.Duration, error) {
	if days, found := strings.CutSuffix(s, "d"); found {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || strconv.Itoa(n) != days {
			return 0, fmt.Errorf("not whole days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// isTimeZone: an IANA time zone name (or UTC).
func isTimeZone(s string) error {
	if s == "" || s == "UTC" {
		return nil
	}
	if strings.EqualFold(s, "local") {
		return fmt.Errorf("Local is not a time zone")
	}
	_, err := time.LoadLocation(s)
	return err
}

// isCron: five fields or a descriptor, the zone given apart.
func isCron(s string) error {
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return fmt.Errorf("the zone goes in time_zone")
	}
	_, err := cron.ParseStandard(s)
	return err
}
