package events

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strings"
	"time"
	"unicode"
)

// Bounds of one usage report: a Claude Code session that ran for hours
// spends tens of millions of tokens, never a billion.
const (
	MaxUsageTokens   = 1_000_000_000
	MaxUsageCostUSD  = 10_000.0
	MaxModelNameLen  = 100
	UsageCostDecimal = 1_000_000 // costs are kept in millionths of a dollar
)

// How a usage report's cost was found.
const (
	CostFromWorker   = "worker"   // the worker reported it (cost_usd)
	CostFromPrices   = "prices"   // the price table's figures for the model
	CostUnpriced     = "unpriced" // neither: the model is not in the table, cost 0
	UsageByWorker    = "worker"   // a worker's attempt used the tokens
	UsageByAdvisor   = "retry_advisor"
	RetryAdvisorName = "retry-advisor" // the actor id of the retry advisor's usage
)

// UsageReport is one attempt's LLM usage as a worker reports it. CostUSD,
// when given, wins over the price table.
type UsageReport struct {
	Model            string   `json:"model" openapi:"required,nonblank,maxLength=100"`
	InputTokens      int64    `json:"input_tokens" openapi:"min=0,max=1000000000"`
	OutputTokens     int64    `json:"output_tokens" openapi:"min=0,max=1000000000"`
	CacheReadTokens  int64    `json:"cache_read_tokens" openapi:"min=0,max=1000000000"`
	CacheWriteTokens int64    `json:"cache_write_tokens" openapi:"min=0,max=1000000000"`
	CostUSD          *float64 `json:"cost_usd,omitempty" openapi:"min=0,max=10000" doc:"what the attempt cost in US dollars; the service's price table prices it when left out"`
}

// UnmarshalJSON reads a report strictly: a field it does not know is an
// error naming it. Decoding itself also makes the object count as one
// free-form value in a request's depth bound, so a request that carries
// usage gives its other free-form fields no extra nesting.
func (u *UsageReport) UnmarshalJSON(b []byte) error {
	type plain UsageReport
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*u = UsageReport(p)
	return nil
}

// Validate checks a report; prefix names the object in the request
// ("usage." inside a completion, "" for the usage route).
func (u *UsageReport) Validate(prefix string) error {
	u.Model = strings.TrimSpace(u.Model)
	switch {
	case u.Model == "":
		return Invalid(prefix+"model", "is required: the model that used the tokens, like claude-sonnet-4-5")
	case TooLong(u.Model, MaxModelNameLen):
		return Invalid(prefix+"model", "is longer than %d characters", MaxModelNameLen)
	case strings.IndexFunc(u.Model, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) >= 0:
		return Invalid(prefix+"model", "must be printable text")
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{"input_tokens", u.InputTokens}, {"output_tokens", u.OutputTokens},
		{"cache_read_tokens", u.CacheReadTokens}, {"cache_write_tokens", u.CacheWriteTokens}} {
		if f.n < 0 || f.n > MaxUsageTokens {
			return Invalid(prefix+f.name, "must be from 0 to %d", MaxUsageTokens)
		}
	}
	if c := u.CostUSD; c != nil && (math.IsNaN(*c) || *c < 0 || *c > MaxUsageCostUSD) {
		return Invalid(prefix+"cost_usd", "must be from 0 to %g", MaxUsageCostUSD)
	}
	return nil
}

// Tokens is every token the report counts: input, output and both cache
// kinds. Token budgets are counted in these.
func (u UsageReport) Tokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Price is a model's price in US dollars per million tokens.
type Price struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read"`
	CacheWrite float64 `json:"cache_write"`
}

// Prices maps a model name, or the start of one, to its price: a name
// like claude-sonnet-4-5-20250929 takes the longest entry it starts with.
type Prices map[string]Price

// DefaultPrices are Anthropic's list prices (per million tokens; cache
// writes at the 5-minute rate) as published on
// https://docs.anthropic.com/en/docs/about-claude/pricing in November 2026.
// LLM_PRICES replaces them.
func DefaultPrices() Prices {
	return Prices{
		"claude-opus-4-5":   {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25},
		"claude-opus-4-1":   {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75},
		"claude-opus-4":     {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75},
		"claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75},
		"claude-sonnet-4":   {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75},
		"claude-3-7-sonnet": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75},
		"claude-haiku-4-5":  {Input: 1, Output: 5, CacheRead: 0.10, CacheWrite: 1.25},
		"claude-3-5-haiku":  {Input: 0.80, Output: 4, CacheRead: 0.08, CacheWrite: 1},
	}
}

// Validate checks that every price is a finite, non-negative figure.
func (p Prices) Validate() error {
	for model, pr := range p {
		if strings.TrimSpace(model) == "" || len(model) > MaxModelNameLen {
			return Invalid("prices", "model name %q must be 1 to %d bytes", model, MaxModelNameLen)
		}
		for _, v := range []float64{pr.Input, pr.Output, pr.CacheRead, pr.CacheWrite} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e6 {
				return Invalid("prices", "model %q has a price that is not from 0 to 1000000 USD per million tokens", model)
			}
		}
	}
	return nil
}

// Find is the price of model; false when no entry fits it.
func (p Prices) Find(model string) (Price, bool) {
	if pr, ok := p[model]; ok {
		return pr, true
	}
	names := make([]string, 0, len(p))
	for name := range p {
		if strings.HasPrefix(model, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return Price{}, false
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	return p[names[0]], true
}

// Cost prices a report: the worker's figure when given, else the table's;
// an unknown model costs 0 and says so.
func (p Prices) Cost(u UsageReport) (usd float64, source string) {
	if u.CostUSD != nil {
		return roundUSD(*u.CostUSD), CostFromWorker
	}
	pr, ok := p.Find(u.Model)
	if !ok {
		return 0, CostUnpriced
	}
	c := (float64(u.InputTokens)*pr.Input + float64(u.OutputTokens)*pr.Output +
		float64(u.CacheReadTokens)*pr.CacheRead + float64(u.CacheWriteTokens)*pr.CacheWrite) / 1e6
	return roundUSD(c), CostFromPrices
}

func roundUSD(v float64) float64 { return math.Round(v*UsageCostDecimal) / UsageCostDecimal }

// MicroUSD is a cost in millionths of a dollar, the counters' unit.
func MicroUSD(usd float64) int64 { return int64(math.Round(usd * UsageCostDecimal)) }

// TeamDay is the team's day: it turns at Start (time since midnight) in
// Loc. Usage totals per day and daily budgets count in it.
type TeamDay struct {
	Loc   *time.Location
	Start time.Duration
}

func (d TeamDay) loc() *time.Location {
	if d.Loc == nil {
		return time.UTC
	}
	return d.Loc
}

// Of is the day t falls in, as YYYY-MM-DD.
func (d TeamDay) Of(t time.Time) string {
	return t.In(d.loc()).Add(-d.Start).Format(time.DateOnly)
}

// Next is when the day t falls in ends.
func (d TeamDay) Next(t time.Time) time.Time {
	local := t.In(d.loc()).Add(-d.Start)
	y, m, day := local.Date()
	return time.Date(y, m, day+1, 0, 0, 0, 0, d.loc()).Add(d.Start)
}

// String says where the day turns: "00:00 UTC".
func (d TeamDay) String() string {
	h, m, s := int(d.Start/time.Hour), int(d.Start%time.Hour/time.Minute), int(d.Start%time.Minute/time.Second)
	at := time.Date(2000, 1, 1, h, m, s, 0, time.UTC).Format("15:04")
	if s != 0 {
		at = time.Date(2000, 1, 1, h, m, s, 0, time.UTC).Format("15:04:05")
	}
	return at + " " + d.loc().String()
}

// TaskUsageReported is LLM usage spent on the task: by the worker's
// attempt (WorkerID set) or by the retry advisor thinking about it. Its
// attribution (type, retry chain, day) and cost are decided when it is
// reported, so totals rebuilt from the log never depend on configuration.
type TaskUsageReported struct {
	Model            string  `json:"model"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	CostSource       string  `json:"cost_source"`
	By               string  `json:"by"` // UsageByWorker or UsageByAdvisor
	WorkerID         string  `json:"worker_id,omitempty"`
	TaskTypeID       string  `json:"task_type_id"`
	RootTaskID       string  `json:"root_task_id"`
	Day              string  `json:"day"`
}

func (TaskUsageReported) EventType() string { return "task.usage_reported" }

func init() { register[TaskUsageReported]() }

// Tokens is every token the event counts.
func (p TaskUsageReported) Tokens() int64 {
	return p.InputTokens + p.OutputTokens + p.CacheReadTokens + p.CacheWriteTokens
}

// UsageAttribution is where a report's usage counts: decided by the store
// (the chain's first task, the team's day) before the event exists.
type UsageAttribution struct {
	RootTaskID string
	Day        string
	Prices     Prices
}

// ReportUsage decides a worker's usage report on the task it holds in
// progress. u must be validated.
func (t *Task) ReportUsage(workerID string, u UsageReport, a UsageAttribution) ([]Payload, error) {
	if err := t.holder(workerID, "report usage on"); err != nil {
		return nil, err
	}
	if err := u.Validate(""); err != nil {
		return nil, err
	}
	p := usageEvent(t, u, a)
	p.By, p.WorkerID = UsageByWorker, workerID
	return []Payload{p}, nil
}

// RecordAdvisorUsage decides the usage of the retry advisor's own model
// call about the task, whatever its status.
func (t *Task) RecordAdvisorUsage(u UsageReport, a UsageAttribution) ([]Payload, error) {
	if err := u.Validate(""); err != nil {
		return nil, err
	}
	p := usageEvent(t, u, a)
	p.By = UsageByAdvisor
	return []Payload{p}, nil
}

func usageEvent(t *Task, u UsageReport, a UsageAttribution) TaskUsageReported {
	cost, source := a.Prices.Cost(u)
	return TaskUsageReported{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens,
		CostUSD: cost, CostSource: source, TaskTypeID: t.TaskTypeID, RootTaskID: a.RootTaskID, Day: a.Day}
}

// Bounds of a type's daily budgets.
const (
	MaxDailyTokenBudget   = 1_000_000_000_000
	MaxDailyCostBudgetUSD = 1_000_000.0
)

func (b *TypeBudgets) validate() error {
	if n := b.DailyTokenBudget; n != nil && (*n < 1 || *n > MaxDailyTokenBudget) {
		return Invalid("daily_token_budget", "must be from 1 to %d tokens (leave it out for no budget)", int64(MaxDailyTokenBudget))
	}
	if c := b.DailyCostBudgetUSD; c != nil {
		if math.IsNaN(*c) || *c < 0.01 || *c > MaxDailyCostBudgetUSD {
			return Invalid("daily_cost_budget_usd", "must be from 0.01 to %g USD (leave it out for no budget)", MaxDailyCostBudgetUSD)
		}
		usd := roundUSD(*c)
		b.DailyCostBudgetUSD = &usd
	}
	return nil
}

// HasBudget reports whether any daily budget is set.
func (b TypeBudgets) HasBudget() bool {
	return b.DailyTokenBudget != nil || b.DailyCostBudgetUSD != nil
}

// BudgetPauser is the pause's actor id (PausedBy) when a budget paused the
// type: the only pause that ends by itself at the day's turn.
const BudgetPauser = "budget"

// PausedByBudget reports whether a budget, not a person, paused the type.
func (tt *TaskType) PausedByBudget() bool { return tt.Paused && tt.PausedBy == BudgetPauser }
