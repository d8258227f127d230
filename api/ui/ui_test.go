package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/ui"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/storetest"
)

const (
	adminEmail    = "ada@example.com"
	adminPassword = "ada-password-123"
)

// site is the API and the UI on one server, a fresh database and a browser
// like client (cookies, no redirects followed).
type site struct {
	t     *testing.T
	ctx   context.Context
	url   string
	db    *store.DB
	srv   *api.Server
	admin events.Meta
	http  *http.Client
	data  blob.Store
}

func newSite(t *testing.T) *site {
	t.Helper()
	ctx := context.Background()
	db, err := store.New(storetest.NewPool(t), store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	secret := []byte("test-secret-0123456789abcdef")
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	dataStore, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	srv, err := api.New(api.Config{DB: db, JWTSecret: secret, BcryptCost: bcrypt.MinCost, Logger: log,
		Data: api.DataConfig{Store: dataStore}})
	require.NoError(t, err)
	pages, err := ui.New(ui.Config{API: srv, DB: db, Secret: secret, Logger: log})
	require.NoError(t, err)
	pages.Register(srv.Echo())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	hash, err := srv.HashPassword(adminPassword)
	require.NoError(t, err)
	u, err := db.CreateUser(ctx, events.UserRegistered{Email: adminEmail, FullName: "Ada Admin", IsAdmin: true},
		adminPassword, hash, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &site{t: t, ctx: ctx, url: ts.URL, db: db, srv: srv, http: hc, data: dataStore,
		admin: events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: u.ID}}}
}

func (s *site) get(path string) (*http.Response, string) {
	s.t.Helper()
	resp, err := s.http.Get(s.url + path)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp, string(b)
}

// post sends a form from this site (its Origin) with the headers given.
func (s *site) post(path string, form url.Values, header ...string) (*http.Response, string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(form.Encode()))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.url)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.http.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp, string(b)
}

func (s *site) login() {
	s.t.Helper()
	resp, _ := s.post("/login", url.Values{"email": {adminEmail}, "password": {adminPassword}, "next": {"/tasks"}})
	require.Equal(s.t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(s.t, "/tasks", resp.Header.Get("Location"))
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

func (s *site) csrf() string {
	s.t.Helper()
	_, body := s.get("/tasks")
	m := csrfMeta.FindStringSubmatch(body)
	require.NotNil(s.t, m, "no csrf-token meta")
	return m[1]
}

// seed makes a type, a worker and a few tasks, one of them failed.
func (s *site) seed() (tt *events.TaskType, task *events.Task) {
	s.t.Helper()
	tt, err := s.srv.CreateTaskType(s.ctx, api.TaskTypeRequest{Name: "report", Label: "Report", SOP: "1. Read\n2. Write",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"days":{"type":"integer","minimum":1}},"required":["days"]}`)}, s.admin)
	require.NoError(s.t, err)
	for _, title := range []string{"Weekly report", "Monthly report <b>bold</b>", "Crawl NVDA"} {
		task, _, err = s.srv.CreateTask(s.ctx, api.CreateTaskRequest{Title: title, TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":3}`)}, s.admin)
		require.NoError(s.t, err)
	}
	return tt, task
}

// The pages a logged-in admin can open, with their status.
func pages(tt *events.TaskType, task *events.Task) map[string]int {
	return map[string]int{
		"/":      http.StatusOK,
		"/tasks": http.StatusOK,
		"/tasks?q=report&status=pending&queue=1&retries=1&stuck=1&priority=high&type=" + tt.ID: http.StatusOK,
		"/tasks?status=bogus":                            http.StatusBadRequest,
		"/tasks?after=not-a-cursor":                      http.StatusBadRequest,
		"/tasks/" + task.ID:                              http.StatusOK,
		"/tasks/" + task.ID + "?at=2000-01-01T00:00:00Z": http.StatusOK,
		"/tasks/" + task.ID + "?at=yesterday":            http.StatusBadRequest,
		"/tasks/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a":    http.StatusNotFound,
		"/tasks/not-a-uuid":                              http.StatusNotFound,
		"/tasks/new":                                     http.StatusOK,
		"/tasks/matching?action=cancel&status=pending":   http.StatusOK,
		"/tasks/matching?action=retry&type=" + tt.ID:     http.StatusOK,
		"/tasks/matching?action=delete&status=pending":   http.StatusBadRequest,
		"/tasks/matching?action=cancel":                  http.StatusBadRequest,
		"/tasks/matching?action=cancel&status=bogus":     http.StatusBadRequest,
		"/tasks/new?type=" + tt.ID:                       http.StatusOK,
		"/tasks/new?type=nope":                           http.StatusBadRequest,
		"/types":                                         http.StatusOK,
		"/types/new":                                     http.StatusOK,
		"/types/" + tt.ID:                                http.StatusOK,
		"/types/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a":    http.StatusNotFound,
		"/workers": http.StatusOK,
		"/events":  http.StatusOK,
		"/events?type=task.created&task=" + task.ID:  http.StatusOK,
		"/events?type=task.nope":                     http.StatusBadRequest,
		"/events?worker=" + task.ID:                  http.StatusOK,
		"/events?type=task.created&type=task.failed": http.StatusOK,
		"/replay/what-if":                            http.StatusOK,
		"/replay/what-if?run=1&since=1d&policy=" + url.QueryEscape(`{"types": {"`+tt.Name+`": {"max_retries": 5}}}`): http.StatusOK,
		"/replay/what-if?run=1&policy=" + url.QueryEscape(`{"types": {"`+tt.Name+`": {"max_retries": -1}}}`):         http.StatusBadRequest,
		"/replay/what-if?run=1&since=999d": http.StatusBadRequest,
		"/login":                           http.StatusOK,
	}
}

func TestEveryPageRendersUnderTheCSP(t *testing.T) {
	s := newSite(t)
	tt, task := s.seed()
	s.login()
	inline := regexp.MustCompile(`(?i)\sstyle=|\son[a-z]+=|<style|javascript:`)
	script := regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`)
	for path, want := range pages(tt, task) {
		resp, body := s.get(path)
		require.Equal(t, want, resp.StatusCode, path)
		csp := resp.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "script-src 'self'", path)
		require.NotContains(t, csp, "unsafe", path)
		require.Contains(t, csp, "frame-ancestors 'none'", path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		require.Nil(t, inline.FindStringIndex(body), "%s has an inline style or handler: %q", path, inline.FindString(body))
		for _, m := range script.FindAllStringSubmatch(body, -1) {
			require.Contains(t, m[1], "src=", "%s has an inline script", path)
			require.Empty(t, strings.TrimSpace(m[2]), "%s has an inline script", path)
		}
		require.Contains(t, body, "</html>", path)
	}
}

func TestLoggedOutVisitsGoToLoginAndBack(t *testing.T) {
	s := newSite(t)
	resp, _ := s.get("/tasks?status=pending")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?next=%2Ftasks%3Fstatus%3Dpending", resp.Header.Get("Location"))

	// A wrong password stays on the form with the API's message.
	resp, body := s.post("/login", url.Values{"email": {adminEmail}, "password": {"wrong"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, body, "email or password is wrong")

	resp, _ = s.post("/login", url.Values{"email": {adminEmail}, "password": {adminPassword}, "next": {"/tasks?status=pending"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/tasks?status=pending", resp.Header.Get("Location"))
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookie {
			session = c
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)

	// next never leaves the site.
	resp, _ = s.post("/login", url.Values{"email": {adminEmail}, "password": {adminPassword}, "next": {"//evil.example.com/x"}})
	require.Equal(t, "/", resp.Header.Get("Location"))

	// htmx requests are sent to the login page with HX-Redirect.
	s.http.Jar.SetCookies(mustURL(s.url), []*http.Cookie{{Name: api.SessionCookie, Value: "expired.or.forged", Path: "/"}})
	req, _ := http.NewRequest(http.MethodGet, s.url+"/tasks", nil)
	req.Header.Set("HX-Request", "true")
	req.Header.Set("HX-Current-URL", s.url+"/tasks?q=x")
	r2, err := s.http.Do(req)
	require.NoError(t, err)
	r2.Body.Close()
	require.Equal(t, "/login?expired=1&next=%2Ftasks%3Fq%3Dx", r2.Header.Get("HX-Redirect"))
	// With no cookie at all (cleared while the page was open): the same.
	s.http.Jar.SetCookies(mustURL(s.url), []*http.Cookie{{Name: api.SessionCookie, Value: "", Path: "/", MaxAge: -1}})
	r2, err = s.http.Do(req)
	require.NoError(t, err)
	r2.Body.Close()
	require.Equal(t, "/login?expired=1&next=%2Ftasks%3Fq%3Dx", r2.Header.Get("HX-Redirect"))

	// The session probe of the live views says 401.
	resp, _ = s.get("/session")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestStateChangesNeedTheCSRFTokenAndOrigin(t *testing.T) {
	s := newSite(t)
	_, task := s.seed()
	s.login()
	token := s.csrf()
	form := url.Values{"id": {task.ID}, "action": {"cancel"}, "reason": {"no longer needed"}}

	resp, body := s.post("/tasks/bulk", form) // no token
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "security token")

	form.Set("_csrf", token)
	resp, _ = s.post("/tasks/bulk", form, "Origin", "https://evil.example.com")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	got, err := s.db.GetTask(s.ctx, s.db.Pool(), task.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, got.Status, "a refused request changed nothing")

	resp, body = s.post("/tasks/bulk", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `id="bulk-confirm"`, "a first post asks to confirm")
	got, err = s.db.GetTask(s.ctx, s.db.Pool(), task.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, got.Status, "nothing is cancelled before the confirmation")
	form.Set("confirm", "1")
	resp, body = s.post("/tasks/bulk", form)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "1 of 1 task cancelled")
	got, err = s.db.GetTask(s.ctx, s.db.Pool(), task.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusCancelled, got.Status)

	// The header works as well as the field (htmx sends the header).
	form.Del("_csrf")
	resp, body = s.post("/tasks/bulk", form, "X-CSRF-Token", token)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "cancelling twice is refused by the command")
	require.Contains(t, body, "0 of 1 task cancelled")

	// The API does not take the cookie for writes.
	req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/admin/workers/tasks/"+task.ID+"/cancel", strings.NewReader(`{}`))
	req.Header.Set("Origin", s.url)
	r2, err := s.http.Do(req)
	require.NoError(t, err)
	r2.Body.Close()
	require.Equal(t, http.StatusUnauthorized, r2.StatusCode)
}

func TestTaskSearchAndFilters(t *testing.T) {
	s := newSite(t)
	_, crawl := s.seed()
	s.login()
	_, body := s.get("/tasks?q=REPORT")
	require.Contains(t, body, "Weekly report")
	require.Contains(t, body, "Monthly report &lt;b&gt;bold&lt;/b&gt;", "titles are escaped")
	require.NotContains(t, body, "Crawl NVDA")
	require.Contains(t, body, "Queue: 3 tasks waiting")
	_, body = s.get("/tasks?q=100%25")
	require.Contains(t, body, "No tasks match")

	// The search finds a task by its edited title, no longer by the old one.
	resp, body := s.post("/tasks/"+crawl.ID+"/edit", url.Values{"_csrf": {s.csrf()}, "title": {"Quarterly report"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	_, body = s.get("/tasks?q=REPORT")
	require.Contains(t, body, "Quarterly report")
	_, body = s.get("/tasks?q=nvda")
	require.Contains(t, body, "No tasks match")
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestFormsShowTheCommandsErrorsAtTheirFields(t *testing.T) {
	s := newSite(t)
	tt, task := s.seed()
	s.login()
	token := s.csrf()

	// A schema violation lands at its field; nothing is created.
	resp, body := s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"Too few days"}, "p.days": {"0"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-params-days"[^>]*aria-invalid="true"`, body)
	require.Contains(t, body, "minimum")
	resp, body = s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"No days"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-params-days"[^>]*aria-invalid="true"`, body, "a missing property is shown at its field")
	resp, _ = s.post("/tasks/new", url.Values{"_csrf": {token}, "task_type_id": {tt.ID}, "title": {"Ten days"}, "p.days": {"10"}, "priority": {"high"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Regexp(t, `^/tasks/[0-9a-f-]{36}$`, resp.Header.Get("Location"))

	// A bad schema on a type, a bad number.
	resp, body = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"broken"}, "param_schema": {`{"type": 12}`}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-param_schema"[^>]*aria-invalid="true"`, body)
	resp, body = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"fine"}, "max_retries": {"many"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "must be a whole number")

	// Assign without a worker, then to a worker; cancel a finished task.
	resp, body = s.post("/tasks/"+task.ID+"/assign", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="assign-worker"[^>]*aria-invalid="true"`, body)
	require.Contains(t, body, "<details open>")
	resp, body = s.post("/workers", url.Values{"_csrf": {token}, "email": {"bot@example.com"}, "full_name": {"Bot"}, "password": {"short"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="w-password"[^>]*aria-invalid="true"`, body)
	resp, _ = s.post("/workers", url.Values{"_csrf": {token}, "email": {"bot@example.com"}, "full_name": {"Bot"}, "password": {"bot-password-1"}, "max_concurrent_tasks": {"2"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	ws, err := s.db.Workers(s.ctx, 10)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	resp, _ = s.post("/tasks/"+task.ID+"/assign", url.Values{"_csrf": {token}, "assigned_to": {ws[0].ID}, "reason": {"knows the repo"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = s.post("/tasks/"+task.ID+"/cancel", url.Values{"_csrf": {token}, "reason": {"done by hand"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, body = s.post("/tasks/"+task.ID+"/cancel", url.Values{"_csrf": {token}, "reason": {"again"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, `role="alert"`)

	// An unknown task is a 404 page, for actions too.
	resp, _ = s.post("/tasks/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a/cancel", url.Values{"_csrf": {token}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// The page weight budget of issue 9: all JS and CSS a page loads, uncompressed.
func TestPageWeight(t *testing.T) {
	s := newSite(t)
	s.login()
	_, body := s.get("/tasks")
	assets := regexp.MustCompile(`(?:src|href)="(/static/[^"]+)"`).FindAllStringSubmatch(body, -1)
	require.NotEmpty(t, assets)
	total := 0
	for _, m := range assets {
		resp, b := s.get(strings.ReplaceAll(m[1], "&amp;", "&"))
		require.Equal(t, http.StatusOK, resp.StatusCode, m[1])
		require.Contains(t, resp.Header.Get("Cache-Control"), "immutable", "versioned assets are cached")
		total += len(b)
	}
	t.Logf("JS+CSS of a page: %d bytes", total)
	require.Less(t, total, 200_000)
}

// The type form sets the limits and the type page shows their use; a bad
// limit is shown at its field and changes nothing.
func TestTypeFormLimits(t *testing.T) {
	s := newSite(t)
	s.login()
	token := s.csrf()

	resp, body := s.post("/types/new", url.Values{"_csrf": {token}, "name": {"crawl"}, "concurrency_key": {"ticker"}, "max_in_progress_per_key": {"1"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-concurrency_key"[^>]*aria-invalid="true"`, body)
	resp, body = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"crawl"}, "rate_limit_count": {"0"}, "rate_limit_per": {"1m"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-rate_limit_count"[^>]*aria-invalid="true"`, body)
	types, err := s.db.ListTaskTypes(s.ctx, true)
	require.NoError(t, err)
	require.Empty(t, types, "nothing was created")

	resp, _ = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"crawl"}, "max_in_progress": {"10"},
		"rate_limit_count": {"50"}, "rate_limit_per": {"60s"}, "concurrency_key": {"$.ticker"}, "max_in_progress_per_key": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	types, err = s.db.ListTaskTypes(s.ctx, true)
	require.NoError(t, err)
	require.Len(t, types, 1)
	tt := types[0]
	require.Equal(t, 10, *tt.MaxInProgress)
	require.Equal(t, events.RateLimit{Count: 50, Per: "1m"}, *tt.RateLimit)
	require.Equal(t, "$.ticker", tt.ConcurrencyKey)
	require.Equal(t, 1, *tt.MaxInProgressPerKey)

	_, body = s.get("/types/" + tt.ID)
	require.Regexp(t, `id="f-max_in_progress"[^>]*value="10"`, body)
	require.Regexp(t, `id="f-rate_limit_per"[^>]*value="1m"`, body)
	require.Contains(t, body, `id="limits-use"`)
	require.Contains(t, body, "0 in progress, 0 claims in the window, 0 keys in progress (0 at the limit)")

	// Emptied fields remove the limits.
	resp, _ = s.post("/types/"+tt.ID, url.Values{"_csrf": {token}, "name": {"crawl"}, "max_retries": {"3"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got, err := s.db.GetTaskType(s.ctx, s.db.Pool(), tt.ID)
	require.NoError(t, err)
	require.False(t, got.HasLimits())
}

// The type form sets the alias and params template Telegram's /add uses;
// a template that does not parse is shown at its field.
func TestTypeFormAliasAndParamsTemplate(t *testing.T) {
	s := newSite(t)
	s.login()
	token := s.csrf()
	resp, body := s.post("/types/new", url.Values{"_csrf": {token}, "name": {"reddit_crawl"}, "alias": {"reddit"},
		"params_template": {`{"ticker": {{key}}}`}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-params_template"[^>]*aria-invalid="true"`, body)
	resp, body = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"reddit_crawl"}, "alias": {"Bad Alias"},
		"params_template": {`{"ticker": "{{key}}"}`}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Regexp(t, `id="f-alias"[^>]*aria-invalid="true"`, body)
	resp, _ = s.post("/types/new", url.Values{"_csrf": {token}, "name": {"reddit_crawl"}, "alias": {"reddit"},
		"params_template": {`{"ticker": "{{key}}"}`}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	types, err := s.db.ListTaskTypes(s.ctx, false)
	require.NoError(t, err)
	require.Len(t, types, 1)
	require.Equal(t, "reddit", types[0].Alias)
	require.Equal(t, `{"ticker": "{{key}}"}`, string(types[0].ParamsTemplate))
}
