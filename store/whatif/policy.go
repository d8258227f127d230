package whatif

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clawdbot/task-service/events"
)

// Bounds of a policy, so that a request or a file cannot make the
// simulation unbounded.
const (
	// MaxPolicyChars bounds a policy in characters, as the API document's
	// maxLength counts them; its bytes are at most four times as many.
	MaxPolicyChars   = 16 << 10
	maxPolicyTypes   = 200
	maxSkipReasons   = 20
	maxSkipReasonLen = 200
	maxMaxRetries    = 100
	maxBackoffSecs   = 86400
)

// Policy is a changed retry and offline policy. A field left out keeps
// what the log recorded, so the empty policy changes nothing.
type Policy struct {
	// WorkerOfflineAfter mirrors WORKER_OFFLINE_AFTER: a worker silent this
	// long is offline and the stuck detector fails its tasks in progress.
	WorkerOfflineAfter *time.Duration `json:"worker_offline_after,omitempty"`
	// Types by task type name, with the type's own field names.
	Types map[string]TypePolicy `json:"types,omitempty"`
}

// TypePolicy is one type's retry policy.
type TypePolicy struct {
	MaxRetries          *int `json:"max_retries,omitempty"`
	RetryBackoffSeconds *int `json:"retry_backoff_seconds,omitempty"`
	// SkipAdvised: the advisor's SKIP ends the chain (true today).
	SkipAdvised *bool `json:"skip_advised,omitempty"`
	// SkipReasons: regular expressions; a failure of kind error whose
	// reason matches one is treated as permanent and not retried.
	SkipReasons []string `json:"skip_reasons,omitempty"`

	skip []*regexp.Regexp
}

// permanent says whether a failure of kind and reason matches a skip rule.
func (tp *TypePolicy) permanent(kind, reason string) bool {
	if kind != events.FailureError {
		return false
	}
	for _, re := range tp.skip {
		if re.MatchString(reason) {
			return true
		}
	}
	return false
}

// ParsePolicy reads a policy: strict JSON (an unknown field is an error
// naming it), every value checked. Errors are *events.ValidationError with
// the field's JSON path.
func ParsePolicy(raw []byte) (*Policy, error) {
	if n := utf8.RuneCount(raw); n > MaxPolicyChars {
		return nil, events.Invalid("policy", "is %d characters; at most %d", n, MaxPolicyChars)
	}
	var top map[string]json.RawMessage
	if err := unmarshal(raw, &top, "policy"); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, events.Invalid("policy", "must be a JSON object")
	}
	p := &Policy{}
	for _, name := range sortedKeys(top) {
		v := top[name]
		switch name {
		case "worker_offline_after":
			d, err := parseDuration(v, name)
			if err != nil {
				return nil, err
			}
			p.WorkerOfflineAfter = &d
		case "types":
			types, err := parseTypes(v)
			if err != nil {
				return nil, err
			}
			p.Types = types
		default:
			return nil, unknownField(name, "worker_offline_after, types")
		}
	}
	return p, nil
}

func parseTypes(raw json.RawMessage) (map[string]TypePolicy, error) {
	var byName map[string]map[string]json.RawMessage
	if err := unmarshal(raw, &byName, "types"); err != nil {
		return nil, err
	}
	if len(byName) > maxPolicyTypes {
		return nil, events.Invalid("types", "has %d types; at most %d", len(byName), maxPolicyTypes)
	}
	out := make(map[string]TypePolicy, len(byName))
	for _, name := range sortedKeys(byName) {
		tp, err := parseType(byName[name], "types."+name)
		if err != nil {
			return nil, err
		}
		out[name] = tp
	}
	return out, nil
}

func parseType(fields map[string]json.RawMessage, path string) (TypePolicy, error) {
	var tp TypePolicy
	if fields == nil {
		return tp, events.Invalid(path, "must be a JSON object")
	}
	for _, name := range sortedKeys(fields) {
		v, field := fields[name], path+"."+name
		switch name {
		case "max_retries":
			n, err := parseInt(v, field, 0, maxMaxRetries)
			if err != nil {
				return tp, err
			}
			tp.MaxRetries = &n
		case "retry_backoff_seconds":
			n, err := parseInt(v, field, 0, maxBackoffSecs)
			if err != nil {
				return tp, err
			}
			tp.RetryBackoffSeconds = &n
		case "skip_advised":
			var b bool
			if err := unmarshal(v, &b, field); err != nil {
				return tp, err
			}
			tp.SkipAdvised = &b
		case "skip_reasons":
			if err := unmarshal(v, &tp.SkipReasons, field); err != nil {
				return tp, err
			}
			if len(tp.SkipReasons) > maxSkipReasons {
				return tp, events.Invalid(field, "has %d rules; at most %d", len(tp.SkipReasons), maxSkipReasons)
			}
			for i, expr := range tp.SkipReasons {
				at := fmt.Sprintf("%s[%d]", field, i)
				if expr == "" || utf8.RuneCountInString(expr) > maxSkipReasonLen {
					return tp, events.Invalid(at, "must be a regular expression of 1 to %d characters", maxSkipReasonLen)
				}
				re, err := regexp.Compile(expr)
				if err != nil {
					return tp, events.Invalid(at, "is not a regular expression: %v", err)
				}
				tp.skip = append(tp.skip, re)
			}
		default:
			return tp, unknownField(field, "max_retries, retry_backoff_seconds, skip_advised, skip_reasons")
		}
	}
	return tp, nil
}

func parseInt(raw json.RawMessage, field string, lo, hi int) (int, error) {
	var n int
	if err := unmarshal(raw, &n, field); err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, events.Invalid(field, "is %d; must be from %d to %d", n, lo, hi)
	}
	return n, nil
}

func parseDuration(raw json.RawMessage, field string) (time.Duration, error) {
	var s string
	if err := unmarshal(raw, &s, field); err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, events.Invalid(field, "%q is not a duration (10m, 1h30m)", s)
	}
	if d <= 0 {
		return 0, events.Invalid(field, "is %s; must be more than zero", s)
	}
	if d > 7*24*time.Hour {
		return 0, events.Invalid(field, "is %s; at most 168h", s)
	}
	return d, nil
}

// unmarshal decodes one value; null is refused, as the API refuses it.
func unmarshal(raw []byte, v any, field string) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return events.Invalid(field, "must not be null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if ok := asTypeError(err, &te); ok {
			return events.Invalid(field, "must be %s, not a JSON %s", describeType(v), te.Value)
		}
		return events.Invalid(field, "is not valid JSON: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return events.Invalid(field, "has more than one JSON value")
	}
	return nil
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	*te = t
	return ok
}

func describeType(v any) string {
	switch v.(type) {
	case *int:
		return "an integer"
	case *bool:
		return "true or false"
	case *string:
		return "a string"
	case *[]string:
		return "an array of strings"
	default:
		return "an object"
	}
}

func unknownField(field, known string) error {
	return events.Invalid(field, "unknown field; the known fields are %s", known)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MaxSince caps how far back a what-if reads.
const MaxSince = 366 * 24 * time.Hour

// ParseSince reads a window such as "30d" or "12h": days or a Go
// duration, more than zero and at most MaxSince.
func ParseSince(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d := time.Duration(-1)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days && n > 0 && n <= 366 {
			d = time.Duration(n) * 24 * time.Hour
		}
	} else if v, err := time.ParseDuration(s); err == nil {
		d = v
	}
	if d <= 0 || d > MaxSince {
		return 0, events.Invalid("since", "%q: give days (30d) or a duration (12h), more than zero and at most 366d", s)
	}
	return d, nil
}

// MarshalJSON writes the policy in the shape ParsePolicy reads.
func (p *Policy) MarshalJSON() ([]byte, error) {
	out := struct {
		WorkerOfflineAfter string                `json:"worker_offline_after,omitempty"`
		Types              map[string]TypePolicy `json:"types,omitempty"`
	}{Types: p.Types}
	if p.WorkerOfflineAfter != nil {
		out.WorkerOfflineAfter = p.WorkerOfflineAfter.String()
	}
	return json.Marshal(out)
}
