package events

import (
	"fmt"
	"strings"
	"time"
)

// Account payloads: what admins (and users themselves) do to a user after it
// was registered. Passwords never enter the log (ADR 002): a change says who
// made it, not what it is.

// UserUpdated carries the editable profile as it is after the change.
type UserUpdated struct {
	FullName           string `json:"full_name"`
	MaxConcurrentTasks int    `json:"max_concurrent_tasks"`
	IsAdmin            bool   `json:"is_admin"`
	IsWorker           bool   `json:"is_worker"`
}

// UserDeactivated: the account can no longer log in or act; the tasks it
// held went back to the pool (each with its own task.released).
type UserDeactivated struct {
	Reason        string   `json:"reason,omitempty"`
	ReleasedTasks []string `json:"released_tasks,omitempty"`
}

// UserReactivated: the account may log in again (old tokens stay dead).
type UserReactivated struct {
	Reason string `json:"reason,omitempty"`
}

// UserPasswordChanged says who set the new password: the user ("self") or
// an admin ("admin"). It ends every token issued before it and any lockout.
type UserPasswordChanged struct {
	By string `json:"by"`
}

// UserLockedOut: too many wrong passwords in a row; logins are refused
// until Until. Level counts the lockouts in a row (each doubles the delay).
type UserLockedOut struct {
	Failures      int       `json:"failures"`
	Level         int       `json:"level"`
	Seconds       int       `json:"seconds"`
	Until         time.Time `json:"until"`
	ClientAddress string    `json:"client_address,omitempty"`
}

func (UserUpdated) EventType() string         { return "user.updated" }
func (UserDeactivated) EventType() string     { return "user.deactivated" }
func (UserReactivated) EventType() string     { return "user.reactivated" }
func (UserPasswordChanged) EventType() string { return "user.password_changed" }
func (UserLockedOut) EventType() string       { return "user.locked_out" }

func init() {
	register[UserUpdated]()
	register[UserDeactivated]()
	register[UserReactivated]()
	register[UserPasswordChanged]()
	register[UserLockedOut]()
}

// AuthEventTypes are the events after which a user's cached authentication
// state must be read again (tokens revoked, roles changed).
var AuthEventTypes = []string{"user.updated", "user.deactivated", "user.reactivated", "user.password_changed"}

// UserEdit holds the fields an admin may change; nil leaves a field as is.
type UserEdit struct {
	FullName           *string
	MaxConcurrentTasks *int
	IsAdmin            *bool
	IsWorker           *bool
}

// Update decides an admin's edit by actorID. It returns no events when
// nothing changes. An admin cannot take the admin role from itself, so the
// last admin cannot lock everyone out.
func (u *User) Update(e UserEdit, actorID string) ([]Payload, error) {
	p := UserUpdated{FullName: u.FullName, MaxConcurrentTasks: u.MaxConcurrentTasks, IsAdmin: u.IsAdmin, IsWorker: u.IsWorker}
	if e.FullName != nil {
		p.FullName = strings.TrimSpace(*e.FullName)
		if p.FullName == "" {
			return nil, Invalid("full_name", "must not be empty")
		}
		if TooLong(p.FullName, 200) {
			return nil, Invalid("full_name", "is longer than 200 characters")
		}
	}
	if e.MaxConcurrentTasks != nil {
		p.MaxConcurrentTasks = *e.MaxConcurrentTasks
		if p.MaxConcurrentTasks < 1 || p.MaxConcurrentTasks > MaxConcurrentLimit {
			return nil, Invalid("max_concurrent_tasks", "must be between 1 and %d", MaxConcurrentLimit)
		}
	}
	if e.IsAdmin != nil {
		p.IsAdmin = *e.IsAdmin
	}
	if e.IsWorker != nil {
		p.IsWorker = *e.IsWorker
	}
	if !p.IsAdmin && !p.IsWorker {
		// The request may be well-formed (is_worker false for a worker-only
		// account): the account's state refuses it.
		return nil, Unusable("is_worker", "a user is an admin, a worker or both")
	}
	if u.ID == actorID && u.IsAdmin && !p.IsAdmin {
		return nil, Invalid("is_admin", "you cannot take the admin role from yourself; ask another admin")
	}
	if p == (UserUpdated{FullName: u.FullName, MaxConcurrentTasks: u.MaxConcurrentTasks, IsAdmin: u.IsAdmin, IsWorker: u.IsWorker}) {
		return nil, nil
	}
	return []Payload{p}, nil
}

// Deactivate decides a deactivation by actorID; released lists the tasks
// given back to the pool in the same transaction.
func (u *User) Deactivate(reason string, released []string, actorID string) ([]Payload, error) {
	if u.ID == actorID {
		return nil, fmt.Errorf("%w: you cannot deactivate your own account; ask another admin", ErrInvalidTransition)
	}
	if !u.Active {
		return nil, fmt.Errorf("%w: user %s is already deactivated", ErrInvalidTransition, u.Email)
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{UserDeactivated{Reason: reason, ReleasedTasks: released}}, nil
}

// Reactivate lets a deactivated user log in again.
func (u *User) Reactivate(reason string) ([]Payload, error) {
	if u.Active {
		return nil, fmt.Errorf("%w: user %s is active", ErrInvalidTransition, u.Email)
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{UserReactivated{Reason: reason}}, nil
}

// Password changers.
const (
	PasswordBySelf  = "self"
	PasswordByAdmin = "admin"
)

// ChangePassword decides a new password (already hashed by the caller).
func ChangePassword(password, by string) ([]Payload, error) {
	if err := CheckPassword("password", password); err != nil {
		return nil, err
	}
	return []Payload{UserPasswordChanged{By: by}}, nil
}

// LockoutPolicy is how long a lockout lasts: Base, doubled for each lockout
// that follows the previous one within Memory, at most Max.
type LockoutPolicy struct {
	Base, Max, Memory time.Duration
}

// LockOut decides a lockout after failures wrong passwords in a row.
func (u *User) LockOut(failures int, client string, pol LockoutPolicy, now time.Time) []Payload {
	level := 1
	if u.LockedUntil != nil && now.Sub(*u.LockedUntil) < pol.Memory {
		level = u.Lockouts + 1
	}
	d := pol.Base
	for i := 1; i < level && d < pol.Max; i++ {
		d *= 2
	}
	d = min(d, pol.Max)
	return []Payload{UserLockedOut{Failures: failures, Level: level, Seconds: int(d / time.Second),
		Until: now.Add(d).UTC(), ClientAddress: client}}
}

// LockedAt reports whether logins are refused at now, and for how long.
func (u *User) LockedAt(now time.Time) (time.Duration, bool) {
	if u.LockedUntil == nil || !now.Before(*u.LockedUntil) {
		return 0, false
	}
	return u.LockedUntil.Sub(now), true
}
