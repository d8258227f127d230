package ui_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

// The Schedules pages: every one renders under the CSP; the form shows
// the command's errors at their fields; the actions act.
func TestSchedulePages(t *testing.T) {
	s := newSite(t)
	tt, _ := s.seed()
	s.login()
	token := s.csrf()

	// A too short interval and params that break the schema, at their fields.
	form := url.Values{"_csrf": {token}, "name": {"Weekly report"}, "task.task_type_id": {tt.ID}, "task.title": {"Weekly report"},
		"task.params": {`{"days":0}`}, "task.priority": {"high"}, "interval.every": {"30"}, "interval.unit": {"minutes"},
		"time_zone": {"Europe/Berlin"}, "overlap": {"skip"}, "max_failures": {"3"}}
	form.Set("task.params", `{"days":0}`)
	resp, body := s.post("/schedules/new", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-task-params"[^>]*aria-invalid="true"`, body)
	require.Contains(t, body, "minimum")
	form.Set("task.params", `{"days":7}`)
	form.Set("time_zone", "Mars/Olympus")
	resp, body = s.post("/schedules/new", form)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-time_zone"[^>]*aria-invalid="true"`, body)
	form.Set("time_zone", "Europe/Berlin")
	resp, _ = s.post("/schedules/new", form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc := resp.Header.Get("Location")
	require.Regexp(t, `^/schedules/[0-9a-f-]{36}$`, loc)
	id := strings.TrimPrefix(loc, "/schedules/")

	// Edit: a cron replaces the interval.
	form.Set("cron", "0 6 * * 1-5")
	resp, _ = s.post(loc, form)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got, err := s.db.GetSchedule(s.ctx, s.db.Pool(), id)
	require.NoError(t, err)
	require.Equal(t, "0 6 * * 1-5", got.Cron)
	require.Nil(t, got.Interval)

	// Actions: run now opens the new task; pause, then a refused pause shows its error.
	resp, _ = s.post(loc+"/run", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Regexp(t, `^/tasks/[0-9a-f-]{36}$`, resp.Header.Get("Location"))
	_, body = s.get(resp.Header.Get("Location"))
	require.Contains(t, body, `<a href="`+loc+`" id="task-schedule">execution #1</a>`, "the task links to its schedule")
	resp, _ = s.post(loc+"/pause", url.Values{"_csrf": {token}, "reason": {"holiday"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, body = s.post(loc+"/pause", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "cannot pause a schedule that is paused")
	resp, _ = s.post(loc+"/pause", url.Values{}) // no CSRF token
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	cancelled, err := s.srv.CreateSchedule(s.ctx, api.ScheduleRequest{Task: &events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "x",
		Params: []byte(`{"days":1}`)}, ScheduleFields: api.ScheduleFields{Cron: "@daily"}}, s.admin)
	require.NoError(t, err)
	_, err = s.srv.CancelSchedule(s.ctx, cancelled.ID, "", s.admin)
	require.NoError(t, err)

	inline := regexp.MustCompile(`(?i)\sstyle=|\son[a-z]+=|<style|javascript:`)
	for path, want := range map[string]int{
		"/schedules": http.StatusOK, "/schedules?state=paused": http.StatusOK, "/schedules/new": http.StatusOK,
		"/schedules/new?type=" + tt.ID: http.StatusOK, loc: http.StatusOK, loc + "?before=2": http.StatusOK,
		"/schedules/" + cancelled.ID: http.StatusOK, "/schedules/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a": http.StatusNotFound,
		"/schedules/nope": http.StatusNotFound,
	} {
		resp, body := s.get(path)
		require.Equal(t, want, resp.StatusCode, path)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", path)
		require.Nil(t, inline.FindStringIndex(body), "%s has an inline style or handler", path)
		require.Contains(t, body, "</html>", path)
	}
	_, body = s.get("/schedules?state=paused")
	require.Contains(t, body, "Weekly report")
	require.Contains(t, body, `cron &#34;0 6 * * 1-5&#34;`)
	_, body = s.get(loc)
	require.Contains(t, body, "#1")
	require.Contains(t, body, "holiday")
	require.Contains(t, body, `action="`+loc+`/resume"`)
}
