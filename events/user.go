package events

import (
	"net/mail"
	"strings"
	"time"
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
}

// Apply folds one event of the user's stream.
func (u *User) Apply(e Envelope) {
	switch p := e.Payload.(type) {
	case UserRegistered:
		*u = User{ID: e.StreamID, Email: p.Email, FullName: p.FullName, IsAdmin: p.IsAdmin,
			IsWorker: p.IsWorker, MaxConcurrentTasks: p.MaxConcurrentTasks, CreatedAt: e.OccurredAt}
	case WorkerWentOnline:
		u.Online = true
	case WorkerWentOffline:
		u.Online = false
	}
	u.Version = e.Version
}

// Limits for users.
const (
	MaxConcurrentLimit = 100
	MinPasswordLen     = 8
	MaxPasswordLen     = 72  // bcrypt's limit
	MaxEmailLen        = 254 // RFC 5321's path limit
)

// RegisterUser validates a new user. Workers start offline until their first
// heartbeat.
func RegisterUser(p UserRegistered, password string) ([]Payload, error) {
	p.Email = strings.ToLower(strings.TrimSpace(p.Email))
	if p.Email == "" {
		return nil, Invalid("email", "is required")
	}
	if len(p.Email) > MaxEmailLen {
		return nil, Invalid("email", "is longer than %d bytes", MaxEmailLen)
	}
	if a, err := mail.ParseAddress(p.Email); err != nil || a.Address != p.Email {
		return nil, Invalid("email", "is not an email address")
	}
	p.FullName = strings.TrimSpace(p.FullName)
	if p.FullName == "" {
		return nil, Invalid("full_name", "is required")
	}
	if len(p.FullName) > 200 {
		return nil, Invalid("full_name", "is longer than 200 bytes")
	}
	if len(password) < MinPasswordLen || len(password) > MaxPasswordLen {
		return nil, Invalid("password", "must be %d to %d bytes", MinPasswordLen, MaxPasswordLen)
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
