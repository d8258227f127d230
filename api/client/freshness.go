package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

const freshnessBase = "/api/v1/admin/freshness-rules"

// NewFreshnessRule is the body of createFreshnessRule; in an edit
// (UpdateFreshnessRule) the fields given replace the current ones.
type NewFreshnessRule struct {
	Name          string `json:"name,omitempty"`
	TaskTypeID    string `json:"task_type_id,omitempty"`
	TitleTemplate string `json:"title_template,omitempty"`
	// ParamsTemplate is a JSON object with {{key}} in its strings.
	ParamsTemplate string                     `json:"-"`
	MaxAge         string                     `json:"max_age,omitempty"`
	Thresholds     *events.PriorityThresholds `json:"thresholds,omitempty"`
	RisingBoost    float64                    `json:"rising_boost,omitempty"`
	Keys           []events.FreshnessKey      `json:"keys,omitempty"`
}

// body is the rule as the API reads it: the params template as its text
// in a JSON string, so the server names what is wrong with it.
func (r NewFreshnessRule) body() any {
	type plain NewFreshnessRule
	out := struct {
		plain
		ParamsTemplate string `json:"params_template,omitempty"`
	}{plain(r), r.ParamsTemplate}
	return out
}

// CreateFreshnessRule defines a freshness rule.
func (c *Client) CreateFreshnessRule(ctx context.Context, r NewFreshnessRule) (*events.FreshnessRule, error) {
	var out events.FreshnessRule
	_, err := c.create(ctx, freshnessBase, r.body(), &out)
	return &out, err
}

// UpdateFreshnessRule edits a rule: the fields given replace the current ones.
func (c *Client) UpdateFreshnessRule(ctx context.Context, id string, r NewFreshnessRule) (*events.FreshnessRule, error) {
	var out events.FreshnessRule
	return &out, c.Do(ctx, http.MethodPut, freshnessBase+"/"+url.PathEscape(id), r.body(), &out)
}

// FreshnessRules lists the rules, newest first.
func (c *Client) FreshnessRules(ctx context.Context) ([]events.FreshnessRule, error) {
	var out []events.FreshnessRule
	return out, c.Do(ctx, http.MethodGet, freshnessBase, nil, &out)
}

// FreshnessRule reads one rule.
func (c *Client) FreshnessRule(ctx context.Context, id string) (*events.FreshnessRule, error) {
	var out events.FreshnessRule
	return &out, c.Do(ctx, http.MethodGet, freshnessBase+"/"+url.PathEscape(id), nil, &out)
}

// FreshnessRuleAction runs pause (with an optional reason) or resume.
func (c *Client) FreshnessRuleAction(ctx context.Context, id, action, reason string) (*events.FreshnessRule, error) {
	var body any
	if reason != "" {
		body = map[string]string{"reason": reason}
	}
	var out events.FreshnessRule
	return &out, c.Do(ctx, http.MethodPost, freshnessBase+"/"+url.PathEscape(id)+"/"+url.PathEscape(action), body, &out)
}

// DeleteFreshnessRule deletes a rule and answers it as it was.
func (c *Client) DeleteFreshnessRule(ctx context.Context, id string) (*events.FreshnessRule, error) {
	var out events.FreshnessRule
	return &out, c.Do(ctx, http.MethodDelete, freshnessBase+"/"+url.PathEscape(id), nil, &out)
}

// ReplaceFreshnessKeys makes keys the rule's whole watchlist.
func (c *Client) ReplaceFreshnessKeys(ctx context.Context, id string, keys []events.FreshnessKey) (*events.FreshnessRule, error) {
	if keys == nil {
		keys = []events.FreshnessKey{}
	}
	var out events.FreshnessRule
	return &out, c.Do(ctx, http.MethodPut, freshnessBase+"/"+url.PathEscape(id)+"/keys", map[string]any{"keys": keys}, &out)
}

// FreshnessKeys reads a page of a rule's keys by key (after: the last key
// of the previous page; limit 0: the default).
func (c *Client) FreshnessKeys(ctx context.Context, id, after string, limit int) ([]store.FreshnessKeyView, error) {
	v := url.Values{}
	if after != "" {
		v.Set("after", after)
	}
	if limit > 0 {
		v.Set("limit", fmt.Sprint(limit))
	}
	path := freshnessBase + "/" + url.PathEscape(id) + "/keys"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []store.FreshnessKeyView
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}
