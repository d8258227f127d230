package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
		leaf := deepest(ve)
		path := "params"
		for _, p := range leaf.InstanceLocation {
			path += "." + p
		}
		return events.Invalid(path, "%s", strings.TrimSpace(leaf.ErrorKind.LocalizedString(englishPrinter)))
	}
	return err
}

// deepest follows the first cause down to the most specific failure.
func deepest(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

var englishPrinter = message.NewPrinter(language.English)
