package ui

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/store"
)

// Config configures the UI.
type Config struct {
	// API runs the commands and checks logins, as for the JSON API.
	API *api.Server
	// DB is read through the store's queries.
	DB     *store.DB
	Logger zerolog.Logger
	// Secret keys the CSRF tokens (the JWT secret is fine: a label separates
	// the uses).
	Secret []byte
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// UI serves the admin pages.
type UI struct {
	cfg    Config
	api    *api.Server
	db     *store.DB
	log    zerolog.Logger
	views  *views
	assets *assets
	pages  [][]string // the paths of the pages (GET routes behind the login), split at "/"
}

// New parses the templates and indexes the assets; it fails on a template
// that does not parse.
func New(cfg Config) (*UI, error) {
	if cfg.API == nil || cfg.DB == nil {
		return nil, errors.New("ui: Config.API and Config.DB are required")
	}
	if len(cfg.Secret) < 16 {
		return nil, errors.New("ui: Config.Secret must be at least 16 bytes")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	as, err := newAssets()
	if err != nil {
		return nil, err
	}
	vs, err := parseViews(as)
	if err != nil {
		return nil, err
	}
	u := &UI{cfg: cfg, api: cfg.API, db: cfg.DB, log: cfg.Logger, views: vs, assets: as}
	for _, r := range u.routes() {
		if r.method == http.MethodGet && !r.public {
			u.pages = append(u.pages, strings.Split(r.path, "/"))
		}
	}
	return u, nil
}

// route is one UI endpoint; public ones need no login.
type route struct {
	method, path string
	handler      echo.HandlerFunc
	public       bool
}

// routes is every UI page and action. Add a page here (and to nav).
func (u *UI) routes() []route {
	return []route{
		{method: http.MethodGet, path: "/login", handler: u.loginPage, public: true},
		{method: http.MethodPost, path: "/login", handler: u.login, public: true},
		{method: http.MethodPost, path: "/logout", handler: u.logout},
		{method: http.MethodGet, path: "/session", handler: u.session},
		{method: http.MethodGet, path: "/static/:name", handler: u.asset, public: true},

		{method: http.MethodGet, path: "/", handler: u.dashboard},
		{method: http.MethodGet, path: "/tasks", handler: u.tasks},
		{method: http.MethodPost, path: "/tasks/bulk", handler: u.bulk},
		{method: http.MethodGet, path: "/tasks/matching", handler: u.matching},
		{method: http.MethodPost, path: "/tasks/matching", handler: u.runMatching},
		{method: http.MethodGet, path: "/tasks/new", handler: u.newTask},
		{method: http.MethodPost, path: "/tasks/new", handler: u.createTask},
		{method: http.MethodGet, path: "/tasks/:id", handler: u.task},
		{method: http.MethodGet, path: "/tasks/:id/params.json", handler: u.taskJSON("params")},
		{method: http.MethodGet, path: "/tasks/:id/result.json", handler: u.taskJSON("result")},
		{method: http.MethodPost, path: "/tasks/:id/cancel", handler: u.cancelTask},
		{method: http.MethodPost, path: "/tasks/:id/assign", handler: u.assignTask},
		{method: http.MethodPost, path: "/tasks/:id/retry", handler: u.retryTask},
		{method: http.MethodPost, path: "/tasks/:id/edit", handler: u.editTask},
		{method: http.MethodPost, path: "/tasks/:id/release", handler: u.releaseTask},
		{method: http.MethodGet, path: "/workflows", handler: u.workflows},
		{method: http.MethodGet, path: "/workflows/:id", handler: u.workflow},
		{method: http.MethodPost, path: "/workflows/:id/cancel", handler: u.cancelWorkflow},
		{method: http.MethodGet, path: "/types", handler: u.types},
		{method: http.MethodGet, path: "/types/new", handler: u.newType},
		{method: http.MethodPost, path: "/types/new", handler: u.createType},
		{method: http.MethodGet, path: "/types/:id", handler: u.typePage},
		{method: http.MethodPost, path: "/types/:id", handler: u.updateType},
		{method: http.MethodPost, path: "/types/:id/archive", handler: u.archiveType},
		{method: http.MethodPost, path: "/types/:id/pause", handler: u.pauseType},
		{method: http.MethodPost, path: "/types/:id/resume", handler: u.resumeType},
		{method: http.MethodGet, path: "/workers", handler: u.workers},
		{method: http.MethodPost, path: "/workers", handler: u.createWorker},
		{method: http.MethodGet, path: "/workers/suggestions", handler: u.workerSuggestions},
		{method: http.MethodGet, path: "/workers/:id/metadata.json", handler: u.workerMetadata},
		{method: http.MethodGet, path: "/workers/:id", handler: u.worker},
		{method: http.MethodPost, path: "/workers/:id/update", handler: u.workerAction("updated", u.updateWorker)},
		{method: http.MethodPost, path: "/workers/:id/deactivate", handler: u.workerAction("deactivated", u.deactivateWorker)},
		{method: http.MethodPost, path: "/workers/:id/reactivate", handler: u.workerAction("reactivated", u.reactivateWorker)},
		{method: http.MethodPost, path: "/workers/:id/password", handler: u.workerAction("password", u.setWorkerPassword)},
		{method: http.MethodGet, path: "/events", handler: u.events},
		{method: http.MethodGet, path: "/replay/what-if", handler: u.whatIf},

		// Schedules (issue 13).
		{method: http.MethodGet, path: "/schedules", handler: u.schedules},
		{method: http.MethodGet, path: "/schedules/new", handler: u.newSchedule},
		{method: http.MethodPost, path: "/schedules/new", handler: u.createSchedule},
		{method: http.MethodGet, path: "/schedules/:id", handler: u.schedule},
		{method: http.MethodPost, path: "/schedules/:id", handler: u.updateSchedule},
		{method: http.MethodPost, path: "/schedules/:id/:action", handler: u.scheduleAction},

		{method: http.MethodGet, path: "/freshness", handler: u.freshnessRules},
		{method: http.MethodGet, path: "/freshness/new", handler: u.newFreshnessRule},
		{method: http.MethodPost, path: "/freshness/new", handler: u.createFreshnessRule},
		{method: http.MethodGet, path: "/freshness/:id", handler: u.freshnessRule},
		{method: http.MethodPost, path: "/freshness/:id", handler: u.updateFreshnessRule},
		{method: http.MethodPost, path: "/freshness/:id/:action", handler: u.freshnessAction},
	}
}

// navItem is one entry of the menu.
type navItem struct{ Path, Label string }

// menu is the navigation, in order. Pages of other features add their line here.
func menu() []navItem {
	return []navItem{
		{"/", "Dashboard"},
		{"/tasks", "Tasks"},
		{"/tasks/new", "New task"},
		{"/types", "Task types"},
		{"/workers", "Workers"},
		{"/workflows", "Workflows"},
		{"/schedules", "Schedules"},
		{"/freshness", "Freshness"},
		{"/events", "Live events"},
		{"/replay/what-if", "What-if"},
	}
}

// Register adds the UI's routes to the API's router.
func (u *UI) Register(e *echo.Echo) {
	for _, r := range u.routes() {
		h := r.handler
		if !r.public {
			h = u.requireAdmin(h)
		}
		if r.method != http.MethodGet {
			h = u.readForm(u.checkCSRF(h, !r.public))
		}
		e.Add(r.method, r.path, h, u.headers)
	}
}

// headers sets the security headers of every UI answer: a strict CSP (no
// inline script or style, nothing from elsewhere), no framing, no sniffing.
func (u *UI) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		return next(c)
	}
}

const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
