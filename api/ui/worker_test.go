package ui_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

// The worker page: who the account is and what it does, and the admin's
// actions on it (capacity and roles, deactivate, reactivate, password),
// each refused with its error at its field or done with a notice.
func TestWorkerPageAndAccountActions(t *testing.T) {
	s := newSite(t)
	s.login()
	token := s.csrf()
	w, err := s.srv.CreateWorker(s.ctx, api.CreateWorkerRequest{Email: "genesis@example.com", Password: "genesis-password", FullName: "Genesis"}, s.admin)
	require.NoError(t, err)
	page := "/workers/" + w.ID

	resp, body := s.get("/workers")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `href="`+page+`"`, "the list links to the page")
	resp, body = s.get(page)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "<h1>Genesis</h1>")
	require.Contains(t, body, "genesis@example.com")

	act := func(action string, form url.Values) (*http.Response, string) {
		form.Set("_csrf", token)
		return s.post(page+"/"+action, form)
	}
	resp, body = act("update", url.Values{"full_name": {"Genesis II"}, "max_concurrent_tasks": {"500"}, "is_worker": {"1"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="wu-max"[^>]*aria-invalid="true"`, body)
	resp, _ = act("update", url.Values{"full_name": {"Genesis II"}, "max_concurrent_tasks": {"3"}, "is_worker": {"1"}, "is_admin": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, page+"?done=updated", resp.Header.Get("Location"))
	got, err := s.db.GetWorkerView(s.ctx, w.ID)
	require.NoError(t, err)
	require.Equal(t, "Genesis II", got.FullName)
	require.Equal(t, 3, got.MaxConcurrentTasks)
	require.True(t, got.IsAdmin && got.IsWorker)

	resp, _ = act("deactivate", url.Values{"reason": {"machine retired"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get(page + "?done=deactivated")
	require.Contains(t, body, `id="worker-notice"`)
	require.Contains(t, body, `id="account-state">deactivated`)
	require.Contains(t, body, `action="`+page+`/reactivate"`, "a deactivated account offers reactivation")
	resp, body = act("deactivate", url.Values{})
	require.Equal(t, http.StatusConflict, resp.StatusCode, "twice is refused")
	require.Contains(t, body, `role="alert"`)
	resp, _ = act("reactivate", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	resp, body = act("password", url.Values{"password": {"short"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="wp-password"[^>]*aria-invalid="true"`, body)
	resp, _ = act("password", url.Values{"password": {"a-new-password-1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	// An admin-only account from the form, listed apart.
	resp, _ = s.post("/workers", url.Values{"_csrf": {token}, "email": {"ops@example.com"}, "full_name": {"Ops"},
		"password": {"ops-password-1"}, "roles": {"1"}, "is_admin": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get("/workers")
	require.Contains(t, body, `id="h-admins"`)
	require.Contains(t, body, "ops@example.com")

	resp, _ = s.get("/workers/not-a-uuid")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = s.get("/workers/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// The workers list is paged by name, 50 a page, with the totals of every
// worker above it; the next page link continues after the last name.
func TestWorkersPagePages(t *testing.T) {
	s := newSite(t)
	s.login()
	for i := range 55 {
		_, err := s.srv.CreateWorker(s.ctx, api.CreateWorkerRequest{Email: fmt.Sprintf("w%02d@page.example", i),
			Password: "worker-password", FullName: fmt.Sprintf("Worker %02d", i)}, s.admin)
		require.NoError(t, err)
	}
	listed := regexp.MustCompile(`w\d\d@page\.example`)
	next := regexp.MustCompile(`<a href="([^"]+)" rel="next">Next page</a>`)

	resp, body := s.get("/workers")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "55 workers, 0 online")
	first := listed.FindAllString(body, -1)
	require.Len(t, first, 50)
	require.Equal(t, "w00@page.example", first[0], "by name")
	m := next.FindStringSubmatch(body)
	require.NotNil(t, m, "a full page links to the next")
	require.NotContains(t, body, "First page")

	resp, body = s.get(html.UnescapeString(m[1]))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	second := listed.FindAllString(body, -1)
	require.Equal(t, []string{"w50@page.example", "w51@page.example", "w52@page.example", "w53@page.example", "w54@page.example"}, second)
	require.Contains(t, body, `<a href="/workers">First page</a>`)
	require.NotRegexp(t, next, body, "the last page has no next")
	require.Contains(t, body, "55 workers, 0 online", "the totals are every worker's on every page")

	resp, _ = s.get("/workers?after=not-a-cursor")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
