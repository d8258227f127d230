package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/store/whatif"
)

type whatIfData struct {
	Q      url.Values
	Policy string // the textarea's text
	Report *whatif.Report
	Errors formErrors // by input: since, policy, sample, "" for the rest
}

// whatIf shows the what-if replay's form and, once asked (run=1), what
// the policy would have changed. It reads only; the API runs it.
func (u *UI) whatIf(c echo.Context) error {
	q := c.QueryParams()
	d := whatIfData{Q: q, Policy: q.Get("policy"), Errors: formErrors{}}
	if d.Policy == "" {
		p, err := u.currentPolicy(c)
		if err != nil {
			return u.fail(c, err)
		}
		d.Policy = p
	}
	if q.Get("run") == "" {
		return u.render(c, http.StatusOK, "whatif", d)
	}
	rep, err := u.api.WhatIfReplay(c)
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		for field, msg := range fe {
			switch field {
			case "since", "sample":
				d.Errors[field] = msg
			case "":
				d.Errors[""] = msg
			default: // the policy's own fields
				d.Errors["policy"] = field + ": " + msg
			}
		}
		return u.render(c, status, "whatif", d)
	}
	d.Report = rep
	return u.render(c, http.StatusOK, "whatif", d)
}

// currentPolicy is a starting point: each type's max_retries and backoff
// as they are now, which by itself changes nothing but type edits. The
// offline threshold is left out (this instance's setting is not the UI's
// to know), so it stays as recorded until the admin adds one.
func (u *UI) currentPolicy(c echo.Context) (string, error) {
	types, err := u.db.ListTaskTypes(c.Request().Context(), false)
	if err != nil {
		return "", err
	}
	byName := map[string]map[string]int{}
	for _, t := range types {
		byName[t.Name] = map[string]int{"max_retries": t.MaxRetries, "retry_backoff_seconds": t.RetryBackoffSeconds}
	}
	raw, err := json.MarshalIndent(map[string]any{"types": byName}, "", "  ")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(raw)), nil
}
