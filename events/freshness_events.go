package events

import (
	"fmt"
	"time"
)

// Freshness rule stream payloads. Field names are the stored JSON: never
// rename, add.

// FreshnessRuleCreated carries the whole definition and the watchlist.
type FreshnessRuleCreated struct {
	FreshnessSpec
	Keys      []FreshnessKey `json:"keys"`
	CreatedBy string         `json:"created_by,omitempty"`
}

// FreshnessRuleUpdated carries the whole definition after the edit (the
// task type never changes: the keys' tasks are found by it).
type FreshnessRuleUpdated struct {
	FreshnessSpec
	By string `json:"by,omitempty"`
}

// FreshnessKeysReplaced carries the whole new watchlist.
type FreshnessKeysReplaced struct {
	Keys []FreshnessKey `json:"keys"`
	By   string         `json:"by,omitempty"`
}

// FreshnessRulePaused: by an admin, or by the scheduler (Auto) when the
// rule no longer makes a valid task (its type archived, its schema
// changed), with the reason.
type FreshnessRulePaused struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	Auto   bool   `json:"auto,omitempty"`
}

type FreshnessRuleResumed struct {
	By string `json:"by,omitempty"`
}

type FreshnessRuleDeleted struct {
	By string `json:"by,omitempty"`
}

// FreshnessTaskCreated is the scheduler's decision for one key: task TaskID
// was created in the same transaction, at Priority, for Reason.
type FreshnessTaskCreated struct {
	Key             string     `json:"key"`
	TaskID          string     `json:"task_id"`
	Priority        Priority   `json:"priority"`
	Weight          int        `json:"weight"`
	Rising          bool       `json:"rising,omitempty"`
	Score           float64    `json:"score"`
	LastCompletedAt *time.Time `json:"last_completed_at"`
	AgeSeconds      *float64   `json:"age_seconds"`
	Reason          string     `json:"reason"`
}

func (FreshnessRuleCreated) EventType() string  { return "freshness_rule.created" }
func (FreshnessRuleUpdated) EventType() string  { return "freshness_rule.updated" }
func (FreshnessKeysReplaced) EventType() string { return "freshness_rule.keys_replaced" }
func (FreshnessRulePaused) EventType() string   { return "freshness_rule.paused" }
func (FreshnessRuleResumed) EventType() string  { return "freshness_rule.resumed" }
func (FreshnessRuleDeleted) EventType() string  { return "freshness_rule.deleted" }
func (FreshnessTaskCreated) EventType() string  { return "freshness_rule.task_created" }

func init() {
	register[FreshnessRuleCreated]()
	register[FreshnessRuleUpdated]()
	register[FreshnessKeysReplaced]()
	register[FreshnessRulePaused]()
	register[FreshnessRuleResumed]()
	register[FreshnessRuleDeleted]()
	register[FreshnessTaskCreated]()
}

// freshnessSummary is Summary for the freshness rule stream.
func freshnessSummary(e Envelope, who func(string) string) (string, bool) {
	switch p := e.Payload.(type) {
	case FreshnessRuleCreated:
		return fmt.Sprintf("freshness rule %q created: %d keys, max age %s", oneLine(p.Name, summaryTextLen), len(p.Keys), p.MaxAge()), true
	case FreshnessRuleUpdated:
		return fmt.Sprintf("freshness rule %q updated by %s, max age %s", oneLine(p.Name, summaryTextLen), who(p.By), p.MaxAge()), true
	case FreshnessKeysReplaced:
		return fmt.Sprintf("watchlist replaced by %s: %d keys", who(p.By), len(p.Keys)), true
	case FreshnessRulePaused:
		if p.Auto {
			return withText("paused automatically", p.Reason), true
		}
		return withText("paused by "+who(p.By), p.Reason), true
	case FreshnessRuleResumed:
		return "resumed by " + who(p.By), true
	case FreshnessRuleDeleted:
		return "deleted by " + who(p.By), true
	case FreshnessTaskCreated:
		return fmt.Sprintf("task %s: %s", shortID(p.TaskID), oneLine(p.Reason, summaryTextLen)), true
	}
	return "", false
}
