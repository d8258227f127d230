package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/events"
)

// Account routes (issue 11): admins read, edit, deactivate, reactivate and
// reset users; users change their own password.

func (s *Server) getWorker(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	w, err := s.db.GetWorkerView(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, w)
}

type updateWorkerRequest struct {
	FullName           *string `json:"full_name,omitempty" openapi:"nonblank,maxLength=200"`
	MaxConcurrentTasks *int    `json:"max_concurrent_tasks,omitempty" openapi:"min=1,max=100"`
	IsAdmin            *bool   `json:"is_admin,omitempty"`
	IsWorker           *bool   `json:"is_worker,omitempty"`
}

func (s *Server) updateWorker(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req updateWorkerRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	u, err := s.UpdateUser(c.Request().Context(), id, events.UserEdit{FullName: req.FullName, MaxConcurrentTasks: req.MaxConcurrentTasks,
		IsAdmin: req.IsAdmin, IsWorker: req.IsWorker}, actor(c, events.ActorAdmin))
	return s.accountChanged(c, u, err, "user.updated")
}

func (s *Server) deactivateWorker(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	u, err := s.DeactivateUser(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	return s.accountChanged(c, u, err, "user.deactivated")
}

func (s *Server) reactivateWorker(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	u, err := s.ReactivateUser(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	return s.accountChanged(c, u, err, "user.reactivated")
}

type passwordRequest struct {
	Password string `json:"password" openapi:"required,minLength=8,maxLength=72"`
}

// resetPassword is an admin setting a user's password.
func (s *Server) resetPassword(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req passwordRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	u, err := s.SetUserPassword(c.Request().Context(), id, req.Password, actor(c, events.ActorAdmin))
	return s.accountChanged(c, u, err, "user.password_changed")
}

type changePasswordRequest struct {
	CurrentPassword string `json:"current_password" openapi:"required,minLength=1"`
	NewPassword     string `json:"new_password" openapi:"required,minLength=8,maxLength=72"`
}

// changePassword is users changing their own password. Every token issued
// before (this one included) stops working, so the answer carries a new one.
func (s *Server) changePassword(c echo.Context) error {
	var req changePasswordRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := claimsOf(c).Subject
	// The same buckets as login: a stolen token must not become a way to
	// guess the password at bcrypt's expense.
	email, client, now := normalEmail(claimsOf(c).Email), clientAddress(c), s.now()
	if err := s.guard.admit(email, client, now); err != nil {
		return err
	}
	_, hash, err := s.db.CredentialsByID(ctx, id)
	if err != nil {
		return err
	}
	s.guard.checks.Inc()
	if bcrypt.CompareHashAndPassword([]byte(hash), events.BcryptInput(req.CurrentPassword)) != nil {
		// A well-formed request the account's state refuses: not a 400.
		return &httpError{status: http.StatusForbidden, body: ErrorBody{Code: "forbidden", Message: "current_password: is wrong", Field: "current_password"}}
	}
	s.guard.succeeded(email, client, now)
	newHash, err := s.newPasswordHash("new_password", req.NewPassword)
	if err != nil {
		return err
	}
	kind := events.ActorWorker
	if claimsOf(c).IsAdmin {
		kind = events.ActorAdmin
	}
	u, err := s.db.SetPassword(ctx, id, req.NewPassword, newHash, events.PasswordBySelf, actor(c, kind))
	if err != nil {
		return err
	}
	s.auth.saw(u.ID, u.Version)
	tok, exp, err := s.issueToken(u)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, LoginResponse{Token: tok, ExpiresAt: exp, User: u})
}

// newPasswordHash validates and hashes a new password sent as field.
func (s *Server) newPasswordHash(field, password string) (string, error) {
	if err := events.CheckPassword(field, password); err != nil {
		return "", err
	}
	return s.HashPassword(password)
}

// accountChanged answers an account command: the user after it, and this
// instance's cache told at once (other instances hear it from the log).
func (s *Server) accountChanged(c echo.Context, u *events.User, err error, event string) error {
	if err != nil {
		return err
	}
	w, err := s.db.GetWorkerView(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, w)
}

// The account commands admins run, from the API and the UI. Each tells
// this instance's authenticator at once, so a revoked token stops here
// without waiting for the event to come round.

// UpdateUser changes a user's name, capacity or roles.
func (s *Server) UpdateUser(ctx context.Context, id string, edit events.UserEdit, meta events.Meta) (*events.User, error) {
	u, err := s.db.UpdateUser(ctx, id, meta, func(u *events.User) ([]events.Payload, error) { return u.Update(edit, meta.Actor.ID) })
	return s.sawAccount(u, err)
}

// DeactivateUser stops a user's logins and releases the tasks it holds.
func (s *Server) DeactivateUser(ctx context.Context, id, reason string, meta events.Meta) (*events.User, error) {
	u, err := s.db.DeactivateUser(ctx, id, reason, meta)
	return s.sawAccount(u, err)
}

// ReactivateUser lets a deactivated user log in again.
func (s *Server) ReactivateUser(ctx context.Context, id, reason string, meta events.Meta) (*events.User, error) {
	u, err := s.db.UpdateUser(ctx, id, meta, func(u *events.User) ([]events.Payload, error) { return u.Reactivate(reason) })
	return s.sawAccount(u, err)
}

// SetUserPassword is an admin setting a user's password.
func (s *Server) SetUserPassword(ctx context.Context, id, password string, meta events.Meta) (*events.User, error) {
	hash, err := s.newPasswordHash("password", password)
	if err != nil {
		return nil, err
	}
	u, err := s.db.SetPassword(ctx, id, password, hash, events.PasswordByAdmin, meta)
	return s.sawAccount(u, err)
}

func (s *Server) sawAccount(u *events.User, err error) (*events.User, error) {
	if err != nil {
		return nil, err
	}
	s.auth.saw(u.ID, u.Version)
	return u, nil
}
