package events

import (
	"crypto/sha256"
	"encoding/base64"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"
)

// User is the fold of a user stream: an admin, a worker, or both. Its
// password lives outside the log (ADR 002); its heartbeat clock is not an
// event (DESIGN §3).
type User struct {
	ID                 string    `json:"id"`
	Email              string    `json:"email"`
	FullName           string    `json:"full_name"`
	IsAdmin            bool      `json:"is_admin"`
	IsWorker           bool      `json:"is_worker"`
	MaxConcurrentTasks int       `json:"max_concurrent_tasks"`
	Online             bool      `json:"online"`
	CreatedAt          time.Time `json:"created_at"`
	Version            int       `json:"version"`
	// Active is false after user.deactivated: no login, no request.
	Active bool `json:"active"`
	// TokenEpoch counts the events that revoke tokens (password change,
	// deactivation, role change); a token carries the epoch it was issued
	// in and dies when the user's moves on.
	TokenEpoch int `json:"-"`
	// LockedUntil and Lockouts: the last lockout after wrong passwords.
	LockedUntil *time.Time `json:"locked_until"`
	Lockouts    int        `json:"lockouts"`
	// OfflineSince is when the worker last went offline; nil while online
	// or before it was ever heard from.
	OfflineSince *time.Time `json:"offline_since"`
}

// Apply folds one event of the user's stream.
func (u *User) Apply(e Envelope) {
	switch p := e.Payload.(type) {
	case UserRegistered:
		*u = User{ID: e.StreamID, Email: p.Email, FullName: p.FullName, IsAdmin: p.IsAdmin,
			IsWorker: p.IsWorker, MaxConcurrentTasks: p.MaxConcurrentTasks, CreatedAt: e.OccurredAt, Active: true}
	case WorkerWentOnline:
		u.Online, u.OfflineSince = true, nil
	case WorkerWentOffline:
		at := e.OccurredAt
		u.Online, u.OfflineSince = false, &at
	case UserUpdated:
		if p.IsAdmin != u.IsAdmin || p.IsWorker != u.IsWorker {
			u.TokenEpoch++
		}
		u.FullName, u.MaxConcurrentTasks, u.IsAdmin, u.IsWorker = p.FullName, p.MaxConcurrentTasks, p.IsAdmin, p.IsWorker
	case UserDeactivated:
		u.Active = false
		u.TokenEpoch++
	case UserReactivated:
		u.Active = true
	case UserPasswordChanged:
		u.TokenEpoch++
		u.LockedUntil, u.Lockouts = nil, 0
	case UserLockedOut:
		until := p.Until.UTC()
		u.LockedUntil, u.Lockouts = &until, p.Level
	}
	u.Version = e.Version
}

// Limits for users.
const (
	MaxConcurrentLimit = 100
	MinPasswordLen     = 8   // characters
	MaxPasswordLen     = 72  // characters, as the document's maxLength counts; see BcryptInput
	bcryptMaxBytes     = 72  // bcrypt reads no more
	MaxEmailLen        = 254 // RFC 5321's path limit
)

// RegisterUser validates a new user. Workers start offline until their first
// heartbeat.
func RegisterUser(p UserRegistered, password string) ([]Payload, error) {
	p.Email = strings.ToLower(strings.TrimSpace(p.Email))
	if p.Email == "" {
		return nil, Invalid("email", "is required")
	}
	if TooLong(p.Email, MaxEmailLen) {
		return nil, Invalid("email", "is longer than %d characters", MaxEmailLen)
	}
	if a, err := mail.ParseAddress(p.Email); err != nil || a.Address != p.Email {
		return nil, Invalid("email", "is not an email address")
	}
	p.FullName = strings.TrimSpace(p.FullName)
	if p.FullName == "" {
		return nil, Invalid("full_name", "is required")
	}
	if TooLong(p.FullName, 200) {
		return nil, Invalid("full_name", "is longer than 200 characters")
	}
	if err := CheckPassword("password", password); err != nil {
		return nil, err
	}
	if p.MaxConcurrentTasks == 0 {
		p.MaxConcurrentTasks = 1
	}
	if p.MaxConcurrentTasks < 1 || p.MaxConcurrentTasks > MaxConcurrentLimit {
		return nil, Invalid("max_concurrent_tasks", "must be between 1 and %d", MaxConcurrentLimit)
	}
	if !p.IsAdmin && !p.IsWorker {
		return nil, Invalid("role", "a user is an admin, a worker or both")
	}
	return []Payload{p}, nil
}

// CheckPassword refuses a new password shorter than MinPasswordLen or
// longer than MaxPasswordLen characters.
func CheckPassword(field, password string) error {
	if n := utf8.RuneCountInString(password); n < MinPasswordLen || n > MaxPasswordLen {
		return Invalid(field, "must be %d to %d characters", MinPasswordLen, MaxPasswordLen)
	}
	return nil
}

// BcryptInput is what bcrypt hashes for password: the password itself when
// it fits bcrypt's 72 bytes (every hash made before, unchanged), else a NUL
// and its SHA-256 in base64, so that 72 characters of any script count
// whole. No password can start with NUL (the API refuses it in any text),
// so the digest form never equals a password as typed.
func BcryptInput(password string) []byte {
	if len(password) <= bcryptMaxBytes {
		return []byte(password)
	}
	sum := sha256.Sum256([]byte(password))
	return append([]byte{0}, base64.RawStdEncoding.EncodeToString(sum[:])...)
}
