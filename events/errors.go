package events

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the service returns to a client wraps one of
// these; the API maps them to HTTP statuses in exactly one place.
var (
	ErrNotFound          = errors.New("not found")
	ErrInvalid           = errors.New("invalid input")
	ErrInvalidTransition = errors.New("invalid transition")
	ErrConflict          = errors.New("version conflict")
	ErrForbidden         = errors.New("forbidden")
	ErrUnauthenticated   = errors.New("unauthenticated")
	ErrAtCapacity        = errors.New("worker at capacity")
)

// ValidationError names the field (or JSON path) at fault.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func (e *ValidationError) Unwrap() error { return ErrInvalid }

// Invalid returns a *ValidationError for field.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// StateError says a well-formed request names something whose state
// forbids it (an archived task type): a 409 naming the field, not a 400
// about the request's shape.
type StateError struct {
	Field   string
	Message string
}

func (e *StateError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}
func (e *StateError) Unwrap() error { return ErrConflict }

// Unusable returns a *StateError for field.
func Unusable(field, format string, args ...any) error {
	return &StateError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// TransitionError says which command the current status forbids.
type TransitionError struct {
	Command string
	Status  Status
	// Subject is what the command is refused for; empty means a task.
	Subject string
}

func (e *TransitionError) Error() string {
	subject := e.Subject
	if subject == "" {
		subject = "task"
	}
	return fmt.Sprintf("cannot %s a %s that is %s", e.Command, subject, e.Status)
}

func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// NotFoundError names what was not found.
type NotFoundError struct {
	Kind string
	ID   string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %s not found", e.Kind, e.ID) }
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// NotFound returns a *NotFoundError.
func NotFound(kind, id string) error { return &NotFoundError{Kind: kind, ID: id} }

// ErrUnknownReference: a well-formed request names a thing that is not
// there (a worker, a task type): 422, not a 400 about its shape.
var ErrUnknownReference = errors.New("unknown reference")

// UnknownReferenceError names the field and what it named.
type UnknownReferenceError struct {
	Field string
	Kind  string
	ID    string
}

func (e *UnknownReferenceError) Error() string {
	return fmt.Sprintf("%s: no %s %s", e.Field, e.Kind, e.ID)
}

func (e *UnknownReferenceError) Unwrap() error { return ErrUnknownReference }

// FieldOf is the field a validation or unknown-reference error names.
func FieldOf(err error) (string, bool) {
	var v *ValidationError
	if errors.As(err, &v) {
		return v.Field, true
	}
	var u *UnknownReferenceError
	if errors.As(err, &u) {
		return u.Field, true
	}
	var st *StateError
	if errors.As(err, &st) {
		return st.Field, true
	}
	return "", false
}

// Under puts err's field under prefix, an item of a list (tasks[3] and
// task_type_id make tasks[3].task_type_id); any other error gets the
// prefix in its message.
func Under(prefix string, err error) error {
	var v *ValidationError
	if errors.As(err, &v) {
		return &ValidationError{Field: FieldPath(prefix, v.Field), Message: v.Message}
	}
	var u *UnknownReferenceError
	if errors.As(err, &u) {
		return &UnknownReferenceError{Field: FieldPath(prefix, u.Field), Kind: u.Kind, ID: u.ID}
	}
	var st *StateError
	if errors.As(err, &st) {
		return &StateError{Field: FieldPath(prefix, st.Field), Message: st.Message}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// FieldPath is field inside prefix: tasks[3] and task_type_id make
// tasks[3].task_type_id; either may be empty.
func FieldPath(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

// UnknownReference returns an *UnknownReferenceError.
func UnknownReference(field, kind, id string) error {
	return &UnknownReferenceError{Field: field, Kind: kind, ID: id}
}

// DuplicateError says a unique value (an email, a type name) is taken.
type DuplicateError struct {
	Field string
	Value string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%s %q is already taken", e.Field, e.Value)
}

func (e *DuplicateError) Unwrap() error { return ErrConflict }

// ErrTooLarge: a body or a total exceeds its bound (413).
var ErrTooLarge = errors.New("too large")

// TooLargeError names what is too large and by how much.
type TooLargeError struct {
	Field   string
	Message string
}

func (e *TooLargeError) Error() string { return e.Message }
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// TooLarge returns a *TooLargeError for field.
func TooLarge(field, format string, args ...any) error {
	return &TooLargeError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// DuplicateTaskError says a task with the same type and unique key already
// holds the key: pending or in progress, or completed within the window
// the creator asked for.
type DuplicateTaskError struct {
	UniqueKey string
	TaskID    string // the task that holds the key
}

func (e *DuplicateTaskError) Error() string {
	return fmt.Sprintf("task %s already has unique_key %q", e.TaskID, e.UniqueKey)
}

func (e *DuplicateTaskError) Unwrap() error { return ErrConflict }
