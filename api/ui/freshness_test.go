package ui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

// The Freshness pages: every one renders under the CSP; the forms show the
// command's errors at their fields with nothing changed; each key's age and
// next due are shown; the actions act.
func TestFreshnessPages(t *testing.T) {
	s := newSite(t)
	s.login()
	token := s.csrf()
	tt, err := s.srv.CreateTaskType(s.ctx, api.TaskTypeRequest{Name: "reddit_crawl", Label: "Reddit crawl",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}},"required":["ticker"]}`)}, s.admin)
	require.NoError(t, err)

	form := url.Values{"_csrf": {token}, "name": {"watchlist"}, "task_type_id": {tt.ID}, "title_template": {"Reddit crawl for {{key}}"},
		"params_template": {`{"ticker": {{key}}}`}, "max_age": {"6h"}, "rising_boost": {"2"},
		"thresholds.urgent": {"20"}, "thresholds.high": {"5"}, "thresholds.medium": {"2"}, "keys": {"NVDA:5\nINTC:1\nAMD:2:rising"}}
	resp, body := s.post("/freshness/new", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-params_template"[^>]*aria-invalid="true"`, body)
	require.Contains(t, body, "placeholders go inside JSON strings")
	form.Set("params_template", `{"ticker": "{{key}}"}`)
	form.Set("keys", "NVDA:500")
	resp, body = s.post("/freshness/new", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-keys"[^>]*aria-invalid="true"`, body)
	require.Contains(t, body, "keys[0].weight")
	rules, err := s.db.ListFreshnessRules(s.ctx)
	require.NoError(t, err)
	require.Empty(t, rules, "nothing was created")
	form.Set("keys", "NVDA:5\nINTC:1\nAMD:2:rising")
	resp, _ = s.post("/freshness/new", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc := resp.Header.Get("Location")
	require.Regexp(t, `^/freshness/[0-9a-f-]{36}$`, loc)
	id := strings.TrimPrefix(loc, "/freshness/")

	// The keys are due at once; a look creates their tasks.
	_, body = s.get(loc)
	require.Regexp(t, `data-key="AMD">[\s\S]*?rising[\s\S]*?never completed[\s\S]*?due now`, body)
	_, err = s.db.CreateStaleTasks(s.ctx, 100, api.NewParamsCheck())
	require.NoError(t, err)
	_, body = s.get(loc)
	require.Regexp(t, `data-key="NVDA">[\s\S]*?href="/tasks/[0-9a-f-]{36}"[\s\S]*?when its task ends`, body)

	// Edit and the watchlist; a bad max age shows at its field.
	edit := url.Values{"_csrf": {token}, "name": {"watchlist"}, "title_template": {"Reddit crawl for {{key}}"},
		"params_template": {`{"ticker": "{{key}}"}`}, "max_age": {"-1h"}, "rising_boost": {"2"},
		"thresholds.urgent": {"20"}, "thresholds.high": {"5"}, "thresholds.medium": {"2"}}
	resp, body = s.post(loc, edit)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-max_age"[^>]*aria-invalid="true"`, body)
	edit.Set("max_age", "12h")
	resp, _ = s.post(loc, edit)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	r, err := s.db.GetFreshnessRule(s.ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 12*3600, r.MaxAgeSeconds)
	resp, _ = s.post(loc+"/keys", url.Values{"_csrf": {token}, "keys": {"NVDA:9\nTSLA:3"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get(loc)
	require.Contains(t, body, `data-key="TSLA"`)
	require.NotContains(t, body, `data-key="INTC"`)

	// Actions: pause, a refused pause, resume, delete.
	resp, _ = s.post(loc+"/pause", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get(loc)
	require.Contains(t, body, `action="`+loc+`/resume"`)
	require.Regexp(t, `data-key="TSLA">[\s\S]*?paused`, body)
	resp, body = s.post(loc+"/pause", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "cannot pause a freshness rule that is paused")
	resp, _ = s.post(loc+"/resume", url.Values{}) // no CSRF token
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = s.post(loc+"/resume", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	inline := regexp.MustCompile(`(?i)\sstyle=|\son[a-z]+=|<style|javascript:`)
	for path, want := range map[string]int{
		"/freshness": http.StatusOK, "/freshness/new": http.StatusOK, loc: http.StatusOK, loc + "?after=NVDA": http.StatusOK,
		"/freshness/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a": http.StatusNotFound, "/freshness/nope": http.StatusNotFound,
	} {
		resp, body := s.get(path)
		require.Equal(t, want, resp.StatusCode, path)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", path)
		require.Nil(t, inline.FindStringIndex(body), "%s has an inline style or handler", path)
		require.Contains(t, body, "</html>", path)
	}
	_, body = s.get("/freshness")
	require.Contains(t, body, "watchlist")

	resp, _ = s.post(loc+"/delete", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = s.get(loc)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
