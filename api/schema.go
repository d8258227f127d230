package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/clawdbot/task-service/events"
)

// schemas compiles task types' param schemas once per type version.
// santhosh-tekuri/jsonschema: full draft 2020-12 support and instance
// locations in its errors, which is what a 400 must name.
type schemas struct {
	mu    sync.Mutex
	cache map[string]*jsonschema.Schema // key: type id + "@" + version
}

func newSchemas() *schemas { return &schemas{cache: map[string]*jsonschema.Schema{}} }

// compile checks that raw is a JSON Schema this service can apply. Remote and
// file references are refused: a schema must be self-contained.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, events.Invalid("param_schema", "is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("urn:task-service:param-schema", doc); err != nil {
		return nil, events.Invalid("param_schema", "%v", err)
	}
	s, err := c.Compile("urn:task-service:param-schema")
	if err != nil {
		return nil, events.Invalid("param_schema", "is not a valid JSON Schema: %v", firstLine(err.Error()))
	}
	if err := refCycle(doc); err != nil {
		return nil, err
	}
	return s, nil
}

// validate checks params against tt's schema; the error names the JSON path.
func (s *schemas) validate(tt *events.TaskType, params json.RawMessage) error {
	key := fmt.Sprintf("%s@%d", tt.ID, tt.Version)
	s.mu.Lock()
	sch, found := s.cache[key]
	s.mu.Unlock()
	if !found {
		var err error
		if sch, err = compileSchema(tt.ParamSchema); err != nil {
			return fmt.Errorf("task type %s has a schema that no longer compiles: %w", tt.Name, err)
		}
		s.mu.Lock()
		s.cache[key] = sch
		s.mu.Unlock()
	}
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage(`{}`)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return events.Invalid("params", "is not JSON: %v", err)
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return paramsError(ve)
	}
	return err
}

// ParamsError is every way params break their type's schema. The API
// answers with the first, the most specific failure down the first causes
// (errors.As finds it); forms show each of Fields at its own input.
type ParamsError struct {
	First *events.ValidationError
	// Fields has one error per field: a missing property is "is required" at
	// params.NAME. At most maxParamsErrors.
	Fields []*events.ValidationError
}

func (e *ParamsError) Error() string { return e.First.Error() }
func (e *ParamsError) Unwrap() error { return e.First }

// maxParamsErrors bounds the errors kept from one validation (a long array
// can fail at every item).
const maxParamsErrors = 50

func paramsError(ve *jsonschema.ValidationError) *ParamsError {
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			leaves = append(leaves, v)
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	out := &ParamsError{First: leafError(leaves[0])}
	seen := map[string]bool{}
	add := func(field, msg string) {
		if !seen[field] && len(out.Fields) < maxParamsErrors {
			seen[field] = true
			out.Fields = append(out.Fields, &events.ValidationError{Field: field, Message: msg})
		}
	}
	for _, leaf := range leaves {
		if req, ok := leaf.ErrorKind.(*kind.Required); ok {
			for _, name := range req.Missing {
				add(instancePath(leaf)+"."+name, "is required")
			}
			continue
		}
		e := leafError(leaf)
		add(e.Field, e.Message)
	}
	return out
}

func leafError(leaf *jsonschema.ValidationError) *events.ValidationError {
	return &events.ValidationError{Field: instancePath(leaf), Message: strings.TrimSpace(leaf.ErrorKind.LocalizedString(englishPrinter))}
}

// instancePath is where in params a failure is: params.owner.email.
func instancePath(v *jsonschema.ValidationError) string {
	path := "params"
	for _, p := range v.InstanceLocation {
		path += "." + p
	}
	return path
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var englishPrinter = message.NewPrinter(language.English)
