package ui_test

import (
	"net/http"
	"net/url"
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
