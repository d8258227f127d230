package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/digest"
)

// Config configures the API server.
type Config struct {
	DB        *store.DB
	Logger    zerolog.Logger
	JWTSecret []byte
	// TokenTTL is how long a login lasts (default 24h).
	TokenTTL time.Duration
	// BcryptCost for new passwords (default bcrypt.DefaultCost).
	BcryptCost int
	// Registry receives the API's metrics; a fresh one when nil.
	Registry *prometheus.Registry
	// Ready reports whether dependencies beyond the database are up (the
	// listener); nil means nothing else to check.
	Ready func(ctx context.Context) error
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Hub wakes the live tail after commits (local, and remote through the
	// listener); without it the tail polls (TailConfig.Poll).
	Hub *store.Hub
	// Tail configures the live event stream (zero values: defaults).
	Tail TailConfig
	// Login throttles password logins (zero values: defaults).
	Login LoginConfig
	// TrustedProxies are the networks whose X-Forwarded-For is believed
	// for the client address, and whose X-Forwarded-Proto for the scheme;
	// empty: the peer address is the client, and only TLS here is secure.
	TrustedProxies []*net.IPNet
	// CookieSecure says when the session cookie is Secure (COOKIE_SECURE;
	// empty: CookieSecureAuto).
	CookieSecure CookieSecure
	// HSTSMaxAge, when positive, is sent as Strict-Transport-Security on
	// secure requests (HSTS_MAX_AGE); zero: no HSTS.
	HSTSMaxAge time.Duration
	// CORSOrigins may call the API from a browser (CORS_ALLOWED_ORIGINS);
	// none: no cross-origin access.
	CORSOrigins []string
	// BodyReadTimeout bounds reading a request body (default 30 s).
	BodyReadTimeout time.Duration
	// ClaimRecheck is how often a waiting long-poll claims again without a
	// wake, the safety net for a lost one (default 1.5 s).
	ClaimRecheck time.Duration
	// Data configures task data uploads and downloads.
	Data DataConfig
	// Digest is when the daily digest goes out, for its preview (default
	// 09:00 UTC).
	Digest digest.Schedule
	// Telegram configures the bot's commands (the webhook is off without
	// its secret).
	Telegram TelegramConfig
	// WhatIfBudget bounds one what-if replay's run through the API, under
	// the HTTP write timeout (default 60 s); a window that needs longer
	// is refused as too large, for taskctl to run.
	WhatIfBudget time.Duration
	// WhatIfMaxOpenChains bounds the retry chains one what-if replay holds
	// in memory at once (default whatif.DefaultMaxOpenChains); a window
	// that holds more is refused as too large.
	WhatIfMaxOpenChains int
}

// Server is the HTTP API.
type Server struct {
	cfg        Config
	db         *store.DB
	log        zerolog.Logger
	echo       *echo.Echo
	schemas    *schemas
	metrics    *metrics
	routes     []route
	methods    methodTable // the methods of each path, for 405s (refuseWrongMethod)
	dummyHash  []byte
	drain      *drainer
	names      *nameCache
	tokens     verifiedTokens
	tail       *broadcaster
	auth       *authUsers
	guard      *loginGuard
	gate       *claimGate       // nil without a hub: long-polls re-check on a timer only
	uploads    map[string]bool  // "METHOD /path" of the routes that stream uploads (rawBody)
	keyLocks   keyLocks         // requests with one Idempotency-Key on this instance, one at a time
	bodyLimits map[string]int64 // "METHOD /path" of the routes whose bodies may exceed MaxBodyBytes
	whatIfSlot chan struct{}    // one what-if replay at a time on this instance
}

// route is one endpoint: the table registers handlers and documents them
// (api/openapi.go). Every route says what it answers: status and response
// (or media), and errors; a test fails when one is missing.
type route struct {
	method, path string
	id           string // the OpenAPI operationId: a short verb phrase such as claimTask
	summary      string
	role         string
	tag          string // the document's tag; by default the path's resource (see tagName)
	handler      echo.HandlerFunc
	request      any     // body type, nil when none; fields tagged openapi:"required,enum=a|b,min=1,max=9,maxLength=99"
	emptyBody    bool    // the body may be left out (the handler decodes with emptyOK)
	query        []param // query parameters with their types: intParam, boolParam, enumParam, uuidParam, timeParam, stringParam
	status       int     // the success status: http.StatusOK or http.StatusCreated
	response     any     // type of the envelope's data, e.g. events.Task{} or []events.Task{}; orNull{T{}} when it may be null
	media        string  // instead of response: a body that is not the JSON envelope (text/event-stream, text/plain, ...)
	rawBody      bool    // the body is the bytes of a file (any media type) or multipart/form-data files: task data uploads
	idempotent   bool    // it creates something: an Idempotency-Key header makes it answer a repeat with its first answer (api/idempotency.go)
	bodyLimit    int64   // the body's bound (guardBody) when not MaxBodyBytes: the batch of creations
	also         []int   // success statuses besides status: 206 (a Range of a media body), 302 (a redirect to a presigned URL), 200 (a creation that found its thing already there)
	// errors are the statuses the handler itself answers with (400, 404,
	// 409, 503...); 401 and 403 (roles), 413 (bodies) and 500 are added.
	// Write errors: []int{} for none.
	errors []int
}

// New builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if cfg.DB == nil {
		return nil, errors.New("api: Config.DB is required")
	}
	if len(cfg.JWTSecret) < 16 {
		return nil, errors.New("api: JWT secret must be at least 16 bytes; set JWT_SECRET")
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 24 * time.Hour
	}
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Data.defaults()
	if cfg.Digest.Loc == nil {
		cfg.Digest = digest.Schedule{At: digest.Clock{Hour: 9}, Loc: time.UTC}
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("timing-equalizer"), cfg.BcryptCost)
	if err != nil {
		return nil, err
	}
	if cfg.WhatIfBudget <= 0 {
		cfg.WhatIfBudget = 60 * time.Second
	}
	s := &Server{cfg: cfg, db: cfg.DB, log: cfg.Logger, schemas: newSchemas(), dummyHash: dummy, whatIfSlot: make(chan struct{}, 1)}
	s.metrics = newMetrics(cfg.Registry)
	s.drain = newDrainer()
	s.names = newNameCache(cfg.DB, cfg.Now)
	s.tail = newBroadcaster(s, cfg.Hub, cfg.Tail)
	s.auth = newAuthUsers(cfg.DB, cfg.Hub, cfg.Registry)
	s.guard = newLoginGuard(cfg.Login, cfg.Registry)
	if cfg.Hub != nil {
		s.gate = newClaimGate(cfg.Hub, cfg.DB.Claimable, cfg.Logger)
		s.gate.looks, s.gate.turns = s.metrics.gateLooks, s.metrics.gateTurns
	}
	s.echo = s.newEcho()
	return s, nil
}

func (s *Server) now() time.Time { return s.cfg.Now() }

// Handler is the server as an http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Echo exposes the router, for tests that list its routes.
func (s *Server) Echo() *echo.Echo { return s.echo }

func (s *Server) newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(s.log)
	e.IPExtractor = ipExtractor(s.cfg.TrustedProxies)
	e.Use(requestIDs)
	if cors := s.cors(); cors != nil {
		e.Use(cors)
	}
	e.Use(s.recoverer)
	e.Use(s.observe)
	if s.cfg.HSTSMaxAge > 0 {
		e.Use(s.hsts)
	}
	s.routes = s.table()
	s.methods = newMethodTable(s.routes)
	e.Use(s.refuseWrongMethod)
	e.Use(s.guardBody)

	s.uploads, s.bodyLimits = map[string]bool{}, map[string]int64{}
	for _, r := range s.routes {
		if r.rawBody {
			s.uploads[r.method+" "+r.path] = true
		}
		if r.bodyLimit > 0 {
			s.bodyLimits[r.method+" "+r.path] = r.bodyLimit
		}
		// Authentication first: an anonymous caller learns nothing about
		// a route's parameters.
		h := r.handler
		if r.idempotent {
			h = s.idempotent(h)
		}
		h = s.apiRoute(r, h)
		if r.role != rolePublic {
			h = s.requireRole(r.role)(h)
		}
		e.Add(r.method, r.path, h)
	}
	return e
}

// recoverer turns a panic into a logged 500 instead of a dropped connection.
func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				s.log.Error().Interface("panic", r).Str("request_id", requestID(c)).Str("path", c.Path()).Msg("handler panicked")
				err = errors.New("panic")
			}
		}()
		return next(c)
	}
}

// observe logs each request and counts it for /metrics.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		elapsed := time.Since(start)
		method, route := methodLabel(c.Request().Method), routeLabel(c)
		s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
		s.metrics.duration.WithLabelValues(method, route).Observe(elapsed.Seconds())
		ev := s.log.Debug()
		if status >= 500 {
			ev = s.log.Warn()
		}
		ev.Str("method", c.Request().Method).Str("path", c.Request().URL.Path).Int("status", status).
			Dur("elapsed", elapsed).Str("request_id", requestID(c)).Msg("request")
		return nil
	}
}

// methodLabel is a request's method as a metric label: any method a client
// invents is "other", so clients cannot grow the series without bound.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}

// routeLabel is the registered route the router matched (its pattern, such
// as /tasks/:id, never the request's path), or "unmatched".
func routeLabel(c echo.Context) string {
	if c.Path() == "" {
		return "unmatched"
	}
	return c.Path()
}

func (s *Server) healthz(c echo.Context) error {
	return ok(c, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"database": "ok"}
	ready := true
	// Status words only: this route is public, and a driver's error names
	// users, hosts and ports. The detail goes to the log. Reading the
	// database's clock is the database's check too.
	if off, err := s.db.ClockOffset(ctx); err != nil {
		checks["database"], ready = "down", false
		s.log.Warn().Err(err).Msg("readyz: database down")
	} else if err := store.ClockError(off); err != nil {
		checks["clock"], ready = "off", false
		s.log.Error().Err(err).Msg("readyz: clock")
	} else {
		checks["clock"] = "ok"
	}
	if s.cfg.Ready != nil {
		checks["listener"] = "ok"
		if err := s.cfg.Ready(ctx); err != nil {
			checks["listener"], ready = "down", false
			s.log.Warn().Err(err).Msg("readyz: listener down")
		}
	}
	if !ready {
		c.Response().Header().Set("Retry-After", strconv.Itoa(UnavailableRetryAfter))
		return c.JSON(http.StatusServiceUnavailable, envelope{Success: false, Data: checks,
			Error: &ErrorBody{Code: "unavailable", Message: "not ready"}})
	}
	return ok(c, http.StatusOK, checks)
}

// ipExtractor finds the client address: the peer, unless the peer is a
// trusted proxy, then the nearest untrusted address in X-Forwarded-For.
// Without trusted proxies headers are ignored: anyone can send them.
func ipExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}
