package main

import (
	"encoding/json"
	"sort"

	"github.com/clawdbot/task-service/events"
)

// claudeCodeModel is a model's line in the modelUsage of Claude Code's
// --output-format json result.
type claudeCodeModel struct {
	InputTokens              int64   `json:"inputTokens"`
	OutputTokens             int64   `json:"outputTokens"`
	CacheReadInputTokens     int64   `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64   `json:"cacheCreationInputTokens"`
	CostUSD                  float64 `json:"costUSD"`
}

// claudeCodeResult is what the worker reads of Claude Code's result object
// (`claude -p --output-format json`, or the last line of stream-json):
// the session's cost and tokens, in total and per model.
type claudeCodeResult struct {
	Type         string   `json:"type"`
	TotalCostUSD *float64 `json:"total_cost_usd"`
	Usage        *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]claudeCodeModel `json:"modelUsage"`
}

// claudeCodeModelName names usage when the result does not say which model
// used it (older Claude Code versions have no modelUsage).
const claudeCodeModelName = "claude-code"

// usageFromOutput reads the LLM usage out of the command's last JSON line
// when it is Claude Code's result object; nil when it is not one. The
// session becomes one report: every model's tokens together, the model
// that cost most as its name, and Claude Code's own total cost (which the
// service then does not need to price).
func usageFromOutput(line json.RawMessage) *events.UsageReport {
	if len(line) == 0 {
		return nil
	}
	var r claudeCodeResult
	if err := json.Unmarshal(line, &r); err != nil || r.Type != "result" || (r.Usage == nil && len(r.ModelUsage) == 0) {
		return nil
	}
	u := events.UsageReport{Model: claudeCodeModelName, CostUSD: r.TotalCostUSD}
	if len(r.ModelUsage) > 0 {
		names := make([]string, 0, len(r.ModelUsage))
		var cost float64
		for name, m := range r.ModelUsage {
			names = append(names, name)
			u.InputTokens += m.InputTokens
			u.OutputTokens += m.OutputTokens
			u.CacheReadTokens += m.CacheReadInputTokens
			u.CacheWriteTokens += m.CacheCreationInputTokens
			cost += m.CostUSD
		}
		sort.Slice(names, func(i, j int) bool {
			a, b := r.ModelUsage[names[i]], r.ModelUsage[names[j]]
			if a.CostUSD != b.CostUSD {
				return a.CostUSD > b.CostUSD
			}
			return names[i] < names[j]
		})
		u.Model = names[0]
		if u.CostUSD == nil {
			u.CostUSD = &cost
		}
	} else {
		u.InputTokens, u.OutputTokens = r.Usage.InputTokens, r.Usage.OutputTokens
		u.CacheReadTokens, u.CacheWriteTokens = r.Usage.CacheReadInputTokens, r.Usage.CacheCreationInputTokens
	}
	if u.Validate("") != nil {
		return nil // not figures the service would take: report the outcome without them
	}
	return &u
}
