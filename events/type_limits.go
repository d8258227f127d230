package events

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of a type's limits.
const (
	MaxLimit          = 100_000
	MinRateWindow     = time.Second
	MaxRateWindow     = 24 * time.Hour
	MaxKeyPathLen     = 200
	MaxKeyPathSteps   = 16
	MaxConcurrencyKey = 200 // characters of a key's value kept (longer values are cut)
)

// HasLimits reports whether any limit is set.
func (l TypeLimits) HasLimits() bool {
	return l.MaxInProgress != nil || l.RateLimit != nil || l.MaxInProgressPerKey != nil
}

// Describe is the limits in words, for summaries and taskctl: "at most 10 in
// progress; 50 claims per 1m; 1 in progress per $.ticker"; "" when none.
func (l TypeLimits) Describe() string {
	var parts []string
	if l.MaxInProgress != nil {
		parts = append(parts, fmt.Sprintf("at most %d in progress", *l.MaxInProgress))
	}
	if r := l.RateLimit; r != nil {
		parts = append(parts, fmt.Sprintf("%d claims per %s", r.Count, r.Per))
	}
	if l.MaxInProgressPerKey != nil {
		parts = append(parts, fmt.Sprintf("%d in progress per %s", *l.MaxInProgressPerKey, l.ConcurrencyKey))
	}
	return strings.Join(parts, "; ")
}

// RateWindow is the rate limit's window; zero when there is none.
func (l TypeLimits) RateWindow() time.Duration {
	if l.RateLimit == nil {
		return 0
	}
	d, _ := time.ParseDuration(l.RateLimit.Per)
	return d
}

// KeyPath is the concurrency key's path as the steps PostgreSQL's
// jsonb_extract_path_text takes; nil when there is no key.
func (l TypeLimits) KeyPath() []string {
	steps, _ := ParseKeyPath(l.ConcurrencyKey)
	return steps
}

func (l *TypeLimits) validate() error {
	if l.MaxInProgress != nil && (*l.MaxInProgress < 1 || *l.MaxInProgress > MaxLimit) {
		return Invalid("max_in_progress", "must be from 1 to %d (leave it out for no limit)", MaxLimit)
	}
	if r := l.RateLimit; r != nil {
		if r.Count < 1 || r.Count > MaxLimit {
			return Invalid("rate_limit.count", "must be from 1 to %d", MaxLimit)
		}
		d, err := time.ParseDuration(r.Per)
		if err != nil || d < MinRateWindow || d > MaxRateWindow || d%time.Second != 0 {
			return Invalid("rate_limit.per", "must be a whole number of seconds from 1s to 24h, like \"30s\", \"1m\" or \"1h\"")
		}
		r.Per = FormatWindow(d)
	}
	l.ConcurrencyKey = strings.TrimSpace(l.ConcurrencyKey)
	if l.ConcurrencyKey != "" {
		if _, err := ParseKeyPath(l.ConcurrencyKey); err != nil {
			return err
		}
	}
	if n := l.MaxInProgressPerKey; n != nil && (*n < 1 || *n > MaxLimit) {
		return Invalid("max_in_progress_per_key", "must be from 1 to %d", MaxLimit)
	}
	switch {
	case l.ConcurrencyKey != "" && l.MaxInProgressPerKey == nil:
		return Invalid("max_in_progress_per_key", "is required with a concurrency_key")
	case l.ConcurrencyKey == "" && l.MaxInProgressPerKey != nil:
		return Invalid("concurrency_key", "is required with max_in_progress_per_key: the JSON path into params whose value is the key, like $.ticker")
	}
	return nil
}

var pathName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)

// ParseKeyPath reads a concurrency key: a JSON path into params made of
// member names and array indexes, such as $.ticker, $.repo.owner,
// $.items[0] or $["odd name"]. It returns the steps in order.
func ParseKeyPath(path string) ([]string, error) {
	bad := func(why string) ([]string, error) {
		return nil, Invalid("concurrency_key", "%q is not a JSON path into params like $.ticker: %s", cut(path, 64), why)
	}
	if utf8.RuneCountInString(path) > MaxKeyPathLen {
		return bad("too long")
	}
	if !strings.HasPrefix(path, "$") {
		return bad("it must start with $")
	}
	rest := path[1:]
	var steps []string
	for rest != "" {
		if len(steps) == MaxKeyPathSteps {
			return bad("too deep")
		}
		switch {
		case strings.HasPrefix(rest, "."):
			name := pathName.FindString(rest[1:])
			if name == "" {
				return bad("a name must follow each dot")
			}
			steps, rest = append(steps, name), rest[1+len(name):]
		case strings.HasPrefix(rest, `["`):
			end := strings.Index(rest[2:], `"]`)
			if end < 0 {
				return bad(`a ["name"] is not closed`)
			}
			name := rest[2 : 2+end]
			if name == "" || strings.ContainsAny(name, `"\`) {
				return bad(`a ["name"] must be a plain, non-empty name`)
			}
			steps, rest = append(steps, name), rest[2+end+2:]
		case strings.HasPrefix(rest, "["):
			end := strings.Index(rest, "]")
			n, err := strconv.Atoi(rest[1:max(end, 1)])
			if end < 0 || err != nil || n < 0 || rest[1] == '+' {
				return bad("an index must be a number in brackets, like [0]")
			}
			steps, rest = append(steps, strconv.Itoa(n)), rest[end+1:]
		default:
			return bad("expected .name, [\"name\"] or [index]")
		}
	}
	if len(steps) == 0 {
		return bad("it names nothing inside params")
	}
	return steps, nil
}

// FormatWindow writes a rate window the way people do: 90s, 5m, 2h.
func FormatWindow(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return strconv.Itoa(int(d/time.Second)) + "s"
}
