package events

import (
	"bytes"
	"regexp"
	"strings"
	"time"
)

// TaskType is the fold of a task_type stream.
type TaskType struct {
	ID string `json:"id"`
	TaskTypeSpec
	Archived bool `json:"archived"`
	// Paused: claims skip the type's tasks; PausedBy is the actor's id.
	Paused      bool       `json:"paused"`
	PauseReason string     `json:"pause_reason,omitempty"`
	PausedBy    string     `json:"paused_by,omitempty"`
	PausedAt    *time.Time `json:"paused_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	Version     int        `json:"version"`
}

// Apply folds one event of the type's stream.
func (tt *TaskType) Apply(e Envelope) {
	switch p := e.Payload.(type) {
	case TaskTypeCreated:
		*tt = TaskType{ID: e.StreamID, TaskTypeSpec: p.TaskTypeSpec, CreatedAt: e.OccurredAt}
	case TaskTypeUpdated:
		tt.TaskTypeSpec = p.TaskTypeSpec
	case TaskTypeArchived:
		tt.Archived = true
	case TaskTypePaused:
		at := e.OccurredAt
		tt.Paused, tt.PauseReason, tt.PausedBy, tt.PausedAt = true, p.Reason, p.By, &at
	case TaskTypeResumed:
		tt.Paused, tt.PauseReason, tt.PausedBy, tt.PausedAt = false, "", "", nil
	}
	tt.Version = e.Version
	tt.UpdatedAt = e.OccurredAt
}

// Limits of a task type.
const (
	MaxRetriesLimit      = 20
	MaxTimeoutSeconds    = 7 * 24 * 3600
	MaxBackoffSeconds    = 3600
	DefaultMaxRetries    = 3
	MaxSOPLen            = 200_000
	maxTypeNameLen       = 63
	maxTypeLabelLen      = 200
	maxTypeDescLen       = 10_000
	maxParamSchemaLength = 100_000
)

var (
	typeName  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	typeAlias = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
)

// Limits of a type's alias and params template.
const (
	MaxAliasLen          = 32
	MaxParamsTemplateLen = 16 << 10
)

// Validate checks a spec and fills defaults (label from name, empty schema).
// Whether the schema compiles is checked by the caller that owns the compiler.
func (s *TaskTypeSpec) Validate() error {
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" {
		return Invalid("name", "is required")
	}
	if len(s.Name) > maxTypeNameLen || !typeName.MatchString(s.Name) {
		return Invalid("name", "must be lower_snake_case, start with a letter, at most %d characters", maxTypeNameLen)
	}
	s.Label = strings.TrimSpace(s.Label)
	if s.Label == "" {
		s.Label = s.Name
	}
	if TooLong(s.Label, maxTypeLabelLen) {
		return Invalid("label", "is longer than %d characters", maxTypeLabelLen)
	}
	if TooLong(s.Description, maxTypeDescLen) {
		return Invalid("description", "is longer than %d characters", maxTypeDescLen)
	}
	if TooLong(s.SOP, MaxSOPLen) {
		return Invalid("sop", "is longer than %d characters", MaxSOPLen)
	}
	schema := bytes.TrimSpace(s.ParamSchema)
	if len(schema) == 0 || bytes.Equal(schema, []byte("null")) {
		schema = []byte(`{"type":"object"}`)
	}
	if schema[0] != '{' {
		return Invalid("param_schema", "must be a JSON Schema object")
	}
	if len(schema) > maxParamSchemaLength {
		return Invalid("param_schema", "is longer than %d bytes", maxParamSchemaLength)
	}
	s.ParamSchema = schema
	if err := s.validateAlias(); err != nil {
		return err
	}
	if s.MaxRetries < 0 || s.MaxRetries > MaxRetriesLimit {
		return Invalid("max_retries", "must be between 0 and %d", MaxRetriesLimit)
	}
	if s.TimeoutSeconds < 0 || s.TimeoutSeconds > MaxTimeoutSeconds {
		return Invalid("timeout_seconds", "must be between 0 (none) and %d", MaxTimeoutSeconds)
	}
	if s.RetryBackoffSeconds < 0 || s.RetryBackoffSeconds > MaxBackoffSeconds {
		return Invalid("retry_backoff_seconds", "must be between 0 and %d", MaxBackoffSeconds)
	}
	if err := s.TypeBudgets.validate(); err != nil {
		return err
	}
	return s.TypeLimits.validate()
}

// validateAlias checks the alias and the params template's outline; the
// template's placeholders are checked by the caller that parses it
// (store/paramtemplate), as the schema by the one that compiles it.
func (s *TaskTypeSpec) validateAlias() error {
	s.Alias = strings.ToLower(strings.TrimSpace(s.Alias))
	if len(s.Alias) > MaxAliasLen || (s.Alias != "" && !typeAlias.MatchString(s.Alias)) {
		return Invalid("alias", "must be lower case letters, digits, '_' and '-', start with a letter, at most %d characters", MaxAliasLen)
	}
	tpl := bytes.TrimSpace(s.ParamsTemplate)
	if len(tpl) == 0 || bytes.Equal(tpl, []byte("null")) {
		s.ParamsTemplate = nil
		return nil
	}
	if len(tpl) > MaxParamsTemplateLen {
		return Invalid("params_template", "is longer than %d bytes", MaxParamsTemplateLen)
	}
	if tpl[0] != '{' {
		return Invalid("params_template", `must be a JSON object, such as {"ticker": "{{key}}"}`)
	}
	s.ParamsTemplate = tpl
	return nil
}

// Update decides a change of definition; the name may not change.
func (tt *TaskType) Update(s TaskTypeSpec) ([]Payload, error) {
	if tt.Archived {
		return nil, &TransitionError{Command: "update", Status: "archived", Subject: "task type"}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Name != tt.Name {
		return nil, Invalid("name", "cannot change (was %q)", tt.Name)
	}
	return []Payload{TaskTypeUpdated{TaskTypeSpec: s}}, nil
}

// Gated reports whether claims of the type's tasks go through the claim's
// limited branch: it is paused or has a limit (DESIGN §13).
func (tt *TaskType) Gated() bool { return tt.Paused || tt.HasLimits() }

// Pause stops claims of the type's tasks. by is the actor's id.
func (tt *TaskType) Pause(by, reason string) ([]Payload, error) {
	if tt.Paused {
		return nil, &TransitionError{Command: "pause", Status: "paused", Subject: "task type"}
	}
	if tt.Archived {
		return nil, &TransitionError{Command: "pause", Status: "archived", Subject: "task type"}
	}
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, Invalid("reason", "is required: say why the type is paused")
	}
	if TooLong(reason, MaxReasonLen) {
		return nil, Invalid("reason", "is longer than %d characters", MaxReasonLen)
	}
	return []Payload{TaskTypePaused{By: by, Reason: reason}}, nil
}

// Resume lets claims take the type's tasks again.
func (tt *TaskType) Resume(by, reason string) ([]Payload, error) {
	if !tt.Paused {
		return nil, &TransitionError{Command: "resume", Status: "not paused", Subject: "task type"}
	}
	if TooLong(reason, MaxReasonLen) {
		return nil, Invalid("reason", "is longer than %d characters", MaxReasonLen)
	}
	return []Payload{TaskTypeResumed{By: by, Reason: strings.TrimSpace(reason)}}, nil
}

// Archive hides the type from new tasks; existing tasks keep it.
func (tt *TaskType) Archive() ([]Payload, error) {
	if tt.Archived {
		return nil, &TransitionError{Command: "archive", Status: "archived", Subject: "task type"}
	}
	return []Payload{TaskTypeArchived{}}, nil
}
