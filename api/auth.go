package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/events"
)

// Claims is what a token says about its bearer.
type Claims struct {
	Email    string `json:"email"`
	IsAdmin  bool   `json:"adm,omitempty"`
	IsWorker bool   `json:"wrk,omitempty"`
	// Epoch is the user's token epoch at issue (see activeUser).
	Epoch int `json:"ep,omitempty"`
	// LoginExpiresAt, on a stream token, is when the login token it was
	// issued for expires: the stream it opens ends then.
	LoginExpiresAt *jwt.NumericDate `json:"lx,omitempty"`
	jwt.RegisteredClaims
}

const issuer = "task-service"

// issueToken signs a token for u that expires after ttl.
func (s *Server) issueToken(u *events.User) (string, time.Time, error) {
	now := s.now()
	exp := now.Add(s.cfg.TokenTTL)
	claims := Claims{
		Email: u.Email, IsAdmin: u.IsAdmin, IsWorker: u.IsWorker, Epoch: u.TokenEpoch,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: issuer, Subject: u.ID,
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
		},
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.cfg.JWTSecret)
	return tok, exp, err
}

// verifiedTokens remembers the claims of login tokens that passed
// parseToken, so a worker's every request does not pay the HMAC and the
// JSON decoding again (7 % of the server's CPU in taskbench lanes). The key
// is the whole token: the same bytes verify the same way. Expiry is checked
// on every use. When full it starts over: tokens are cheap to verify again.
type verifiedTokens struct {
	mu sync.RWMutex
	m  map[string]*Claims
}

const maxVerifiedTokens = 10_000

func (v *verifiedTokens) get(raw string, now time.Time) *Claims {
	v.mu.RLock()
	c := v.m[raw]
	v.mu.RUnlock()
	if c == nil || !now.Before(c.ExpiresAt.Time) {
		return nil
	}
	return c
}

func (v *verifiedTokens) put(raw string, c *Claims) {
	v.mu.Lock()
	if v.m == nil || len(v.m) >= maxVerifiedTokens {
		v.m = make(map[string]*Claims)
	}
	v.m[raw] = c
	v.mu.Unlock()
}

// parseToken checks signature, algorithm, issuer and expiry. The claims it
// returns are shared between requests: read them, never change them.
func (s *Server) parseToken(raw string) (*Claims, error) {
	if c := s.tokens.get(raw, s.now()); c != nil {
		return c, nil
	}
	var claims Claims
	_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return s.cfg.JWTSecret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(issuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.now))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, unauthenticated("token expired; log in again (POST /api/v1/auth/login)")
	case err != nil:
		return nil, unauthenticated("invalid token; log in again (POST /api/v1/auth/login)")
	case claims.Subject == "":
		return nil, unauthenticated("invalid token: no subject")
	case len(claims.Audience) > 0:
		// A stream token (sse audience) opens the event stream and nothing else.
		return nil, unauthenticated("this token only opens the event stream (?token=); send a login token")
	}
	s.tokens.put(raw, &claims)
	return &claims, nil
}

const claimsKey = "claims"

// requireRole authenticates the bearer and checks its role.
func (s *Server) requireRole(role string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			raw, found := strings.CutPrefix(c.Request().Header.Get(echo.HeaderAuthorization), "Bearer ")
			if (!found || raw == "") && c.Path() == dataDownloadPath && c.Request().Method == http.MethodGet {
				// The admin UI's download links: a GET, opened by the session cookie.
				raw = sessionCookie(c)
				found = raw != ""
			}
			if (!found || raw == "") && c.Path() == streamPath {
				if raw = sessionCookie(c); raw == "" && c.QueryParam("token") != "" {
					return s.streamTokenAuth(c, next)
				}
				found = raw != ""
			}
			if !found || raw == "" {
				return unauthenticated("missing bearer token; send Authorization: Bearer <token> from POST /api/v1/auth/login")
			}
			claims, err := s.Verify(c.Request().Context(), raw, role)
			if err != nil {
				return err
			}
			c.Set(claimsKey, claims)
			return next(c)
		}
	}
}

const (
	roleAdmin  = "admin"
	roleWorker = "worker"
	roleUser   = "user" // any logged-in user, admin or worker
	rolePublic = ""
)

// activeUser checks the token's user as it is now, on every authenticated
// request (bearer, stream token or browser session): it exists, is active,
// has the route's role, and the token was issued in the user's current token
// epoch (no password change, deactivation or role change since). The user
// comes from authUsers, so this costs no database read per request.
func (s *Server) activeUser(ctx context.Context, claims *Claims, role string) error {
	u, err := s.auth.user(ctx, claims.Subject)
	if err == nil && (claims.Epoch > u.TokenEpoch || (!u.Active && claims.Epoch == u.TokenEpoch)) {
		// The token is newer than this instance's copy of the user (a
		// reactivation or role change elsewhere, not yet heard of): tokens
		// of a deactivated user are all older than its epoch, so a revoked
		// token never gets here.
		u, err = s.auth.fresh(ctx, claims.Subject)
	}
	switch {
	case isNotFound(err):
		return unauthenticated("the user of this token does not exist")
	case err != nil:
		return err
	case !u.Active:
		return unauthenticated("this account is deactivated; ask an admin")
	case claims.Epoch != u.TokenEpoch:
		return unauthenticated("this token was revoked (password, role or account changed); log in again (POST /api/v1/auth/login)")
	case (role == roleAdmin && !u.IsAdmin) || (role == roleWorker && !u.IsWorker):
		return forbidden("this route needs the " + role + " role")
	}
	return nil
}

func claimsOf(c echo.Context) *Claims {
	cl, _ := c.Get(claimsKey).(*Claims)
	return cl
}

// actor is who the bearer acts as on this route.
func actor(c echo.Context, kind events.ActorKind) events.Meta {
	return events.Meta{Actor: events.Actor{Kind: kind, ID: claimsOf(c).Subject}, RequestID: requestID(c)}
}

type loginRequest struct {
	Email    string `json:"email" openapi:"required,minLength=1"`
	Password string `json:"password" openapi:"required,minLength=1"`
}

// LoginResponse is data of POST /auth/login.
type LoginResponse struct {
	Token     string       `json:"token"`
	ExpiresAt time.Time    `json:"expires_at"`
	User      *events.User `json:"user"`
}

func (s *Server) login(c echo.Context) error {
	var req loginRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	resp, err := s.Login(c, req.Email, req.Password)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, resp)
}

// Login checks an email and password and issues a login token: POST
// /auth/login and the admin UI's login form. c gives the client address and
// request id the throttle and a lockout event need.
func (s *Server) Login(c echo.Context, email, password string) (*LoginResponse, error) {
	if email == "" {
		return nil, events.Invalid("email", "is required")
	}
	if password == "" {
		return nil, events.Invalid("password", "is required")
	}
	u, err := s.checkPassword(c, email, password)
	if err != nil {
		return nil, err
	}
	tok, exp, err := s.issueToken(u)
	if err != nil {
		return nil, err
	}
	return &LoginResponse{Token: tok, ExpiresAt: exp, User: u}, nil
}

// checkPassword is every password login (API and browser): throttled per
// client address and per account before any bcrypt work, refused while the
// account is locked, and counting wrong passwords in a row to lock it
// (user.locked_out, which every instance then honours).
func (s *Server) checkPassword(c echo.Context, email, password string) (*events.User, error) {
	ctx := c.Request().Context()
	email, client, now := normalEmail(email), clientAddress(c), s.now()
	if err := s.guard.admit(email, client, now); err != nil {
		return nil, err
	}
	wrong := unauthenticated("email or password is wrong")
	u, hash, err := s.db.Credentials(ctx, email)
	if errors.Is(err, events.ErrNotFound) {
		if err := s.guard.locked(email, nil, now); err != nil {
			return nil, err
		}
		// Spend the same time as a real check so timing does not reveal emails.
		s.guard.checks.Inc()
		_ = bcrypt.CompareHashAndPassword(s.dummyHash, events.BcryptInput(password))
		if n := s.guard.failed(email); n > 0 {
			s.guard.lockUnknown(email, n, now)
		}
		return nil, wrong
	}
	if err != nil {
		return nil, err
	}
	if err := s.guard.locked(email, u, now); err != nil {
		return nil, err
	}
	s.guard.checks.Inc()
	if bcrypt.CompareHashAndPassword([]byte(hash), events.BcryptInput(password)) != nil {
		if n := s.guard.failed(email); n > 0 {
			locked, err := s.db.LockOut(ctx, u.ID, n, client, s.guard.cfg.policy(),
				events.Meta{Actor: events.System("login"), RequestID: requestID(c)})
			if err != nil {
				return nil, err
			}
			s.auth.saw(locked.ID, locked.Version)
			s.log.Warn().Str("user_id", u.ID).Str("client", client).Int("failures", n).
				Interface("until", locked.LockedUntil).Msg("account locked after wrong passwords")
		}
		return nil, wrong
	}
	if !u.Active {
		return nil, unauthenticated("this account is deactivated; ask an admin")
	}
	s.guard.succeeded(email, client, now)
	return u, nil
}

// HashPassword hashes with the configured bcrypt cost.
func (s *Server) HashPassword(password string) (string, error) {
	if utf8.RuneCountInString(password) > events.MaxPasswordLen {
		return "", events.Invalid("password", "is longer than %d characters", events.MaxPasswordLen)
	}
	h, err := bcrypt.GenerateFromPassword(events.BcryptInput(password), s.cfg.BcryptCost)
	return string(h), err
}
