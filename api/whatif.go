package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/whatif"
)

// whatIfQuery are the what-if replay's parameters; the UI page and the
// API share them.
func whatIfQuery() []param {
	return []param{
		{name: "since", doc: "the window: days (30d) or a duration (12h), at most 366d (default 30d)",
			schema: map[string]any{"type": "string", "pattern": `^[0-9]+(d|h|m)$`, "maxLength": 8, "default": "30d", "example": "30d",
				"format": "days-or-go-duration", "x-duration-min": "1m", "x-duration-max": "8784h"}},
		{name: "policy", asJSON: true, doc: "the policy as one JSON object (at most 16,384 characters): worker_offline_after (a duration) and types by name, each with " +
			"max_retries, retry_backoff_seconds, skip_advised and skip_reasons (regular expressions matched against a failure's reason); a field left out keeps what the log recorded",
			schema: whatIfPolicySchema()},
		intParam("sample", 1, 1000, "changed chains listed (default 20)"),
	}
}

// whatIfPolicySchema is the policy parameter's JSON (whatif.ParsePolicy).
func whatIfPolicySchema() map[string]any {
	integer := func(max int) map[string]any { return map[string]any{"type": "integer", "minimum": 0, "maximum": max} }
	return map[string]any{"type": "object", "additionalProperties": false,
		"example": map[string]any{"worker_offline_after": "20m", "types": map[string]any{"reddit_crawl": map[string]any{"max_retries": 4, "skip_reasons": []string{"^HTTP 404"}}}},
		"properties": map[string]any{
			"worker_offline_after": map[string]any{"type": "string", "format": "go-duration", "maxLength": 100,
				"x-duration-min": "1ns", "x-duration-max": "168h", "description": "a duration such as 20m, more than zero and at most 168h"},
			"types": map[string]any{"type": "object", "maxProperties": 200, "description": "by task type name",
				"additionalProperties": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
					"max_retries":           integer(100),
					"retry_backoff_seconds": integer(86400),
					"skip_advised":          map[string]any{"type": "boolean"},
					"skip_reasons": map[string]any{"type": "array", "maxItems": 20, "items": map[string]any{
						"type": "string", "format": "regex", "minLength": 1, "maxLength": 200, "description": "an RE2 regular expression"}},
				}}},
		}}
}

// whatIfRequest is a what-if replay's parsed parameters.
type whatIfRequest struct {
	policy *whatif.Policy
	since  time.Duration
	sample int
}

// parseWhatIf reads the parameters; errors name the parameter (and the
// policy's field) at fault.
func parseWhatIf(c echo.Context) (whatIfRequest, error) {
	var r whatIfRequest
	q := c.QueryParams()
	// A parameter left out takes its default; one given empty is refused,
	// as the document's types say.
	since := "30d"
	if vs, given := q["since"]; given {
		since = vs[0]
	}
	d, err := whatif.ParseSince(since)
	if err != nil {
		return r, err
	}
	raw := c.QueryParam("policy")
	if raw == "" {
		raw = "{}"
	}
	p, err := whatif.ParsePolicy([]byte(raw))
	if err != nil {
		return r, err
	}
	if vs, given := q["sample"]; given && vs[0] == "" {
		return r, events.Invalid("sample", "must be a whole number from 1 to 1000")
	}
	n, err := intQueryParam(c, "sample", 1, 1000, 20)
	if err != nil {
		return r, err
	}
	return whatIfRequest{policy: p, since: d, sample: n}, nil
}

// whatIf re-runs a changed policy over the recorded events, reading only.
// One runs at a time per instance: each holds its window's open chains
// (at most Config.WhatIfMaxOpenChains); each is bounded by
// Config.WhatIfBudget.
func (s *Server) whatIf(c echo.Context) error {
	req, err := parseWhatIf(c)
	if err != nil {
		return err
	}
	rep, err := s.runWhatIf(c, req)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, rep)
}

func (s *Server) runWhatIf(c echo.Context, req whatIfRequest) (*whatif.Report, error) {
	select {
	case s.whatIfSlot <- struct{}{}:
		defer func() { <-s.whatIfSlot }()
	default:
		return nil, rateLimited(5*time.Second, "a what-if replay is running on this instance")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.WhatIfBudget)
	defer cancel()
	rep, err := whatif.Run(ctx, s.db.Pool().Pool, whatif.Config{Policy: req.policy, Since: req.since, SampleSize: req.sample,
		MaxOpenChains: s.cfg.WhatIfMaxOpenChains})
	var open *whatif.OpenChainsError
	switch {
	case errors.As(err, &open):
		return nil, events.TooLarge("since", "%v: choose a shorter since", open)
	case err != nil && ctx.Err() == context.DeadlineExceeded && c.Request().Context().Err() == nil:
		return nil, events.TooLarge("since", "the window holds more events than one request reads in %s: narrow since, or run taskctl replay --what-if next to the database",
			s.cfg.WhatIfBudget)
	}
	return rep, err
}

// WhatIfReplay runs a what-if replay for the admin UI with the API's
// parameters and bounds.
func (s *Server) WhatIfReplay(c echo.Context) (*whatif.Report, error) {
	req, err := parseWhatIf(c)
	if err != nil {
		return nil, err
	}
	return s.runWhatIf(c, req)
}
