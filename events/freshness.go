package events

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// StreamFreshnessRule is the stream of one freshness rule: a watchlist of
// keys for which tasks are created when their data gets stale (ADR 023).
const StreamFreshnessRule = "freshness_rule"

// FreshnessState is a rule's place in its life.
type FreshnessState string

const (
	FreshnessActive FreshnessState = "active"
	FreshnessPaused FreshnessState = "paused"
)

// FreshnessKey is one watched key and its weight (its popularity). Rising
// marks a key whose interest is trending up: its score is multiplied by
// the rule's rising boost.
type FreshnessKey struct {
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	Rising bool   `json:"rising,omitempty"`
}

// PriorityThresholds map a key's score (weight × staleness, times the
// rising boost) onto the priorities: a score at or above Urgent is urgent,
// at or above High high, at or above Medium medium, below it low.
type PriorityThresholds struct {
	Urgent float64 `json:"urgent" openapi:"required,min=0,exclusiveMin,max=1000000000,atLeast=high"`
	High   float64 `json:"high" openapi:"required,min=0,exclusiveMin,max=1000000000,atLeast=medium"`
	Medium float64 `json:"medium" openapi:"required,min=0,exclusiveMin,max=1000000000"`
}

// FreshnessSpec is what an admin defines. The templates are checked by
// the store (package store/paramtemplate); rules fill {{key}} only.
type FreshnessSpec struct {
	Name           string `json:"name"`
	TaskTypeID     string `json:"task_type_id"`
	TitleTemplate  string `json:"title_template"`
	ParamsTemplate string `json:"params_template"`
	// MaxAgeSeconds: a key whose newest completed task is older is stale.
	MaxAgeSeconds int64              `json:"max_age_seconds"`
	Thresholds    PriorityThresholds `json:"thresholds"`
	// RisingBoost multiplies the score of a key marked rising.
	RisingBoost float64 `json:"rising_boost"`
}

// MaxAge is the spec's max age as a duration.
func (s FreshnessSpec) MaxAge() time.Duration { return time.Duration(s.MaxAgeSeconds) * time.Second }

// Limits of a rule.
const (
	MaxFreshnessKeys      = 10_000
	MaxFreshnessKeyLen    = 150 // bytes: the unique key adds the rule's id (MaxUniqueKeyLen)
	MaxFreshnessWeight    = 100
	MaxFreshnessAge       = 366 * 24 * time.Hour
	DefaultMinFreshAge    = time.Minute
	maxFreshnessNameLen   = 200
	maxThreshold          = 1e9
	maxRisingBoost        = 100
	DefaultRisingBoost    = 2
	freshnessUniquePrefix = "fresh:"
)

// DefaultThresholds: a key of weight 5 just past its max age is high, of
// weight 1 low.
var DefaultThresholds = PriorityThresholds{Urgent: 20, High: 5, Medium: 2}

// Validate checks a spec and fills defaults (thresholds, boost). Ages
// shorter than minAge are refused.
func (s *FreshnessSpec) Validate(minAge time.Duration) error {
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" {
		return Invalid("name", "is required")
	}
	if utf8.RuneCountInString(s.Name) > maxFreshnessNameLen {
		return Invalid("name", "is longer than %d characters", maxFreshnessNameLen)
	}
	if s.TaskTypeID == "" {
		return Invalid("task_type_id", "is required")
	}
	if minAge <= 0 {
		minAge = DefaultMinFreshAge
	}
	switch age := s.MaxAge(); {
	case s.MaxAgeSeconds <= 0:
		return Invalid("max_age", "must be positive")
	case age < minAge:
		return Invalid("max_age", "must be at least %s", minAge)
	case s.MaxAgeSeconds > int64(MaxFreshnessAge/time.Second):
		return Invalid("max_age", "must be at most %s (366 days)", MaxFreshnessAge)
	}
	if s.Thresholds == (PriorityThresholds{}) {
		s.Thresholds = DefaultThresholds
	}
	t := s.Thresholds
	for _, v := range []struct {
		name string
		v    float64
	}{{"urgent", t.Urgent}, {"high", t.High}, {"medium", t.Medium}} {
		if math.IsNaN(v.v) || v.v <= 0 || v.v > maxThreshold {
			return Invalid("thresholds."+v.name, "must be above 0 and at most %g", float64(maxThreshold))
		}
	}
	if !(t.Medium <= t.High && t.High <= t.Urgent) {
		return Invalid("thresholds", "must rise: medium <= high <= urgent")
	}
	if s.RisingBoost == 0 {
		s.RisingBoost = DefaultRisingBoost
	}
	if math.IsNaN(s.RisingBoost) || s.RisingBoost < 1 || s.RisingBoost > maxRisingBoost {
		return Invalid("rising_boost", "must be between 1 and %d", maxRisingBoost)
	}
	return nil
}

// ValidateKeys checks a watchlist: at most MaxFreshnessKeys, each key
// non-empty, at most MaxFreshnessKeyLen bytes of printable text, given
// once, with a weight from 1 to MaxFreshnessWeight. Keys are trimmed.
func ValidateKeys(keys []FreshnessKey) error {
	if len(keys) > MaxFreshnessKeys {
		return Invalid("keys", "has %d keys; at most %d", len(keys), MaxFreshnessKeys)
	}
	seen := make(map[string]bool, len(keys))
	for i := range keys {
		k := &keys[i]
		field := fmt.Sprintf("keys[%d]", i)
		k.Key = strings.TrimSpace(k.Key)
		switch {
		case k.Key == "":
			return Invalid(field+".key", "is required")
		case TooLong(k.Key, MaxFreshnessKeyLen):
			return Invalid(field+".key", "is longer than %d characters", MaxFreshnessKeyLen)
		case !utf8.ValidString(k.Key) || strings.IndexFunc(k.Key, unicode.IsControl) >= 0:
			return Invalid(field+".key", "must be printable UTF-8 text")
		case seen[k.Key]:
			return Invalid(field+".key", "%q is given twice", k.Key)
		case k.Weight < 1 || k.Weight > MaxFreshnessWeight:
			return Invalid(field+".weight", "must be from 1 to %d", MaxFreshnessWeight)
		}
		seen[k.Key] = true
	}
	return nil
}

// ParseFreshnessKeys reads a watchlist written as KEY[:WEIGHT[:rising]]
// items separated by commas or white space (weight 1 when left out), as
// taskctl and the admin UI take it. It checks the syntax only
// (ValidateKeys checks the list).
func ParseFreshnessKeys(text string) ([]FreshnessKey, error) {
	keys := []FreshnessKey{}
	for _, item := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		parts := strings.Split(item, ":")
		k := FreshnessKey{Key: parts[0], Weight: 1}
		if len(parts) > 1 {
			w, err := strconv.Atoi(parts[1])
			if err != nil {
				return nil, Invalid("keys", "%q: the weight after ':' must be a whole number", item)
			}
			k.Weight = w
		}
		if len(parts) > 2 && (parts[2] != "rising" || len(parts) > 3) {
			return nil, Invalid("keys", "%q: write KEY, KEY:WEIGHT or KEY:WEIGHT:rising", item)
		}
		k.Rising = len(parts) > 2
		keys = append(keys, k)
	}
	return keys, nil
}

// FormatFreshnessKeys writes keys as ParseFreshnessKeys reads them, one a line.
func FormatFreshnessKeys(keys []FreshnessKey) string {
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%d", k.Key, k.Weight)
		if k.Rising {
			b.WriteString(":rising")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// FreshnessUniqueKey is the unique key of the tasks created for key by
// rule ruleID: at most one of them is pending or in progress, whatever
// instance creates it, and the key's state follows the tasks that carry it.
func FreshnessUniqueKey(ruleID, key string) string {
	return freshnessUniquePrefix + ruleID + ":" + key
}

// FreshnessDecision is why a key gets a task now, and at which priority.
type FreshnessDecision struct {
	Priority Priority
	Score    float64
	// Age is how long ago the key's newest task completed; nil when none did.
	Age    *time.Duration
	Reason string
}

// Decide scores a due key: staleness is its age over the max age (1 for a
// key never completed), the score weight × staleness (× the rising boost),
// and the thresholds give the priority. Reason says all of it in one line.
func (s FreshnessSpec) Decide(k FreshnessKey, lastCompleted *time.Time, now time.Time) FreshnessDecision {
	maxAge := s.MaxAge()
	staleness := 1.0
	var d FreshnessDecision
	var why strings.Builder
	why.WriteString(k.Key + ": ")
	if lastCompleted != nil {
		age := now.Sub(*lastCompleted)
		d.Age = &age
		staleness = age.Seconds() / maxAge.Seconds()
		fmt.Fprintf(&why, "last completed %s ago > %s", roundAge(age), roundAge(maxAge))
	} else {
		why.WriteString("never completed")
	}
	d.Score = float64(k.Weight) * staleness
	fmt.Fprintf(&why, "; weight %d", k.Weight)
	if lastCompleted != nil {
		fmt.Fprintf(&why, " × staleness %.2f", staleness)
	}
	if k.Rising {
		d.Score *= s.RisingBoost
		fmt.Fprintf(&why, " × rising %g", s.RisingBoost)
	}
	t := s.Thresholds
	switch {
	case d.Score >= t.Urgent:
		d.Priority = PriorityUrgent
	case d.Score >= t.High:
		d.Priority = PriorityHigh
	case d.Score >= t.Medium:
		d.Priority = PriorityMedium
	default:
		d.Priority = PriorityLow
	}
	if lastCompleted != nil || k.Rising {
		fmt.Fprintf(&why, " = %.1f", d.Score)
	}
	fmt.Fprintf(&why, " → %s", d.Priority)
	d.Reason = why.String()
	return d
}

// roundAge shows an age to the second below an hour, to the minute above.
func roundAge(d time.Duration) string {
	if d >= time.Hour {
		d = d.Round(time.Minute)
	} else {
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// FreshnessRule is the fold of a rule's stream. Its keys live in the
// freshness_keys projection, not here: a rule may watch 10,000 of them.
type FreshnessRule struct {
	ID string `json:"id"`
	FreshnessSpec
	State        FreshnessState `json:"state"`
	PausedReason string         `json:"paused_reason,omitempty"`
	KeyCount     int            `json:"key_count"`
	TasksCreated int64          `json:"tasks_created"`
	Deleted      bool           `json:"-"`
	CreatedBy    *string        `json:"created_by"`
	CreatedAt    time.Time      `json:"created_at"`
	UpdatedAt    time.Time      `json:"updated_at"`
	Version      int            `json:"version"`
}

// Apply folds one event of the rule's stream.
func (r *FreshnessRule) Apply(e Envelope) {
	switch p := e.Payload.(type) {
	case FreshnessRuleCreated:
		*r = FreshnessRule{ID: e.StreamID, FreshnessSpec: p.FreshnessSpec, State: FreshnessActive,
			KeyCount: len(p.Keys), CreatedBy: optional(p.CreatedBy), CreatedAt: e.OccurredAt}
	case FreshnessRuleUpdated:
		r.FreshnessSpec = p.FreshnessSpec
	case FreshnessKeysReplaced:
		r.KeyCount = len(p.Keys)
	case FreshnessRulePaused:
		r.State, r.PausedReason = FreshnessPaused, p.Reason
	case FreshnessRuleResumed:
		r.State, r.PausedReason = FreshnessActive, ""
	case FreshnessRuleDeleted:
		r.Deleted = true
	case FreshnessTaskCreated:
		r.TasksCreated++
	}
	r.UpdatedAt = e.OccurredAt
	r.Version = e.Version
}

// StreamVersion is the version of the last event folded into the aggregate.
func (r *FreshnessRule) StreamVersion() int { return r.Version }

// KeyState is a watched key as the rule's stream defines it: weight, rising
// flag, and since when the key has been watched without a break.
type KeyState struct {
	Weight  int
	Rising  bool
	AddedAt time.Time
}

// ApplyKeys folds the watchlist events of a rule into its keys (nil for a
// new rule): a key that stays keeps its AddedAt.
func ApplyKeys(keys map[string]KeyState, e Envelope) map[string]KeyState {
	var list []FreshnessKey
	switch p := e.Payload.(type) {
	case FreshnessRuleCreated:
		list, keys = p.Keys, nil
	case FreshnessKeysReplaced:
		list = p.Keys
	default:
		return keys
	}
	out := make(map[string]KeyState, len(list))
	for _, k := range list {
		at := e.OccurredAt
		if old, ok := keys[k.Key]; ok {
			at = old.AddedAt
		}
		out[k.Key] = KeyState{Weight: k.Weight, Rising: k.Rising, AddedAt: at}
	}
	return out
}

// NewFreshnessRule decides a rule's creation; the spec and keys must be
// validated.
func NewFreshnessRule(spec FreshnessSpec, keys []FreshnessKey, by string) []Payload {
	return []Payload{FreshnessRuleCreated{FreshnessSpec: spec, Keys: keys, CreatedBy: by}}
}

// Pause, Resume and Delete decide the admin's commands.
func (r *FreshnessRule) Pause(by, reason string) ([]Payload, error) {
	if r.State != FreshnessActive {
		return nil, &FreshnessTransitionError{Command: "pause", State: r.State}
	}
	if TooLong(reason, MaxReasonLen) {
		return nil, Invalid("reason", "is longer than %d characters", MaxReasonLen)
	}
	return []Payload{FreshnessRulePaused{By: by, Reason: reason}}, nil
}

func (r *FreshnessRule) Resume(by string) ([]Payload, error) {
	if r.State != FreshnessPaused {
		return nil, &FreshnessTransitionError{Command: "resume", State: r.State}
	}
	return []Payload{FreshnessRuleResumed{By: by}}, nil
}

// FreshnessTransitionError says which command the rule's state forbids.
type FreshnessTransitionError struct {
	Command string
	State   FreshnessState
}

func (e *FreshnessTransitionError) Error() string {
	return fmt.Sprintf("cannot %s a freshness rule that is %s", e.Command, e.State)
}

func (e *FreshnessTransitionError) Unwrap() error { return ErrInvalidTransition }
