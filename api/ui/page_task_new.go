package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
)

// schemaField is one input of the new-task form, made from a property of
// the type's JSON Schema.
type schemaField struct {
	Name        string
	Kind        string // string, number, integer, boolean, enum, strings, integers, numbers or json
	Required    bool
	Enum        []string
	NumericEnum bool // the enum's values are numbers
	Description string
	Value       string
	Error       string
}

type newTaskData struct {
	Types    []events.TaskType
	Type     *events.TaskType
	Fields   []schemaField
	RawOnly  bool // the schema has no properties: one JSON field for all params
	Assignee *workerPicker
	Prios    []events.Priority
	Form     url.Values
	Errors   formErrors
	// Unplaced are the params errors no input shows (a raw JSON form, a path
	// inside a field): the fieldset lists them.
	Unplaced []string
}

func (u *UI) newTask(c echo.Context) error {
	return u.renderNewTask(c, http.StatusOK, c.QueryParam("type"), nil, nil)
}

func (u *UI) renderNewTask(c echo.Context, status int, typeID string, form url.Values, errs formErrors) error {
	ctx := c.Request().Context()
	d := newTaskData{Prios: allPriorities(), Form: form, Errors: errs}
	var err error
	if d.Types, err = u.db.ListTaskTypes(ctx, false); err != nil {
		return u.fail(c, err)
	}
	if d.Assignee, err = u.workerPicker(ctx, "assigned_to", "assigned_to", "the pool", form.Get("assigned_to"), errs["assigned_to"]); err != nil {
		return u.fail(c, err)
	}
	for i := range d.Types {
		if d.Types[i].ID == typeID {
			d.Type = &d.Types[i]
		}
	}
	if typeID != "" && d.Type == nil && errs == nil {
		d.Errors = formErrors{"task_type_id": "Choose one of the task types below; " + typeID + " is not one of them."}
		status = http.StatusBadRequest
	}
	if d.Type != nil {
		d.Fields, d.RawOnly = schemaFields(d.Type.ParamSchema)
		placed := map[string]bool{"params": true}
		for i := range d.Fields {
			f := &d.Fields[i]
			f.Value = form.Get("p." + f.Name)
			f.Error = d.Errors["params."+f.Name]
			placed["params."+f.Name] = true
		}
		d.Unplaced = unplacedErrors(d.Errors, placed)
	}
	return u.render(c, status, "task_new", d)
}

func unplacedErrors(errs formErrors, placed map[string]bool) []string {
	var out []string
	for field, msg := range errs {
		if strings.HasPrefix(field, "params") && !placed[field] {
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}

// schemaProperty is the part of a JSON Schema property the form reads.
type schemaProperty struct {
	Type        any                       `json:"type"`
	Enum        []any                     `json:"enum"`
	Description string                    `json:"description"`
	Items       *schemaProperty           `json:"items"`
	Properties  map[string]schemaProperty `json:"properties"`
	Required    []string                  `json:"required"`
}

// maxFormDepth bounds how deep nested objects become inputs; deeper ones are
// JSON boxes.
const maxFormDepth = 4

// schemaFields reads the properties of a JSON Schema object into inputs:
// nested objects become their fields (named owner.email), arrays of
// strings or numbers a line per item, enums of strings or numbers a
// choice; anything else is a raw JSON field. rawOnly when there are no
// properties.
func schemaFields(raw json.RawMessage) (fields []schemaField, rawOnly bool) {
	var s schemaProperty
	if json.Unmarshal(raw, &s) != nil || len(s.Properties) == 0 {
		return nil, true
	}
	fields = objectFields("", s, 0)
	sort.SliceStable(fields, func(i, j int) bool {
		if fields[i].Required != fields[j].Required {
			return fields[i].Required
		}
		return fields[i].Name < fields[j].Name
	})
	return fields, false
}

func objectFields(prefix string, obj schemaProperty, depth int) []schemaField {
	required := map[string]bool{}
	for _, r := range obj.Required {
		required[r] = true
	}
	var fields []schemaField
	for name, p := range obj.Properties {
		typ, _ := p.Type.(string)
		if typ == "object" && len(p.Properties) > 0 && depth < maxFormDepth {
			fields = append(fields, objectFields(prefix+name+".", p, depth+1)...)
			continue
		}
		f := schemaField{Name: prefix + name, Required: required[name], Description: p.Description, Kind: "json"}
		switch {
		case len(p.Enum) > 0:
			f.Kind, f.Enum, f.NumericEnum = enumChoices(p.Enum)
		case typ == "string", typ == "number", typ == "integer", typ == "boolean":
			f.Kind = typ
		case typ == "array" && p.Items != nil:
			switch p.Items.Type {
			case "string":
				f.Kind = "strings"
			case "integer":
				f.Kind = "integers"
			case "number":
				f.Kind = "numbers"
			}
		}
		fields = append(fields, f)
	}
	return fields
}

// enumChoices makes a choice of an enum of strings or of numbers; a mixed
// enum stays a JSON field.
func enumChoices(values []any) (kind string, choices []string, numeric bool) {
	strs, nums := 0, 0
	for _, v := range values {
		switch x := v.(type) {
		case string:
			strs++
			choices = append(choices, x)
		case float64:
			nums++
			choices = append(choices, strconv.FormatFloat(x, 'f', -1, 64))
		}
	}
	if strs == len(values) || nums == len(values) {
		return "enum", choices, nums == len(values)
	}
	return "json", nil, false
}

// formParams builds the params object from the form. A number that does
// not parse is sent as text, so the schema's own error names the field.
func formParams(fields []schemaField, rawOnly bool, form url.Values) (json.RawMessage, error) {
	if rawOnly {
		return formValueJSON("params", form.Get("params"))
	}
	out := map[string]any{}
	for _, f := range fields {
		v := form.Get("p." + f.Name)
		if f.Kind == "boolean" {
			if v != "" {
				setPath(out, f.Name, true)
			} else if f.Required {
				setPath(out, f.Name, false)
			}
			continue
		}
		if strings.TrimSpace(v) == "" {
			continue
		}
		var x any
		switch {
		case f.Kind == "integer", f.Kind == "enum" && f.NumericEnum:
			x = number(v, f.Kind == "integer")
		case f.Kind == "number":
			x = number(v, false)
		case f.Kind == "strings", f.Kind == "integers", f.Kind == "numbers":
			items := []any{}
			for _, line := range strings.Split(v, "\n") {
				if line = strings.TrimSpace(line); line == "" {
					continue
				}
				if f.Kind == "strings" {
					items = append(items, line)
				} else {
					items = append(items, number(line, f.Kind == "integers"))
				}
			}
			x = items
		case f.Kind == "json":
			raw, err := formValueJSON("params."+f.Name, v)
			if err != nil {
				return nil, err
			}
			x = raw
		default:
			x = v
		}
		setPath(out, f.Name, x)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	return b, nil
}

// number parses a form value as a whole number or any number; text that
// does not parse stays text, for the schema to refuse at its field.
func number(v string, whole bool) any {
	v = strings.TrimSpace(v)
	if whole {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
		return v
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return n
	}
	return v
}

// setPath sets out[a][b]... for the dotted path "a.b", making the objects
// on the way.
func setPath(out map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := out[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			out[p] = next
		}
		out = next
	}
	out[parts[len(parts)-1]] = v
}

func (u *UI) createTask(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	ctx := c.Request().Context()
	typeID := form.Get("task_type_id")
	req := api.CreateTaskRequest{Title: strings.TrimSpace(form.Get("title")), Description: form.Get("description"),
		TaskTypeID: typeID, Priority: events.Priority(form.Get("priority")), Reason: strings.TrimSpace(form.Get("reason")),
		UniqueKey: form.Get("unique_key"), UniqueFor: strings.TrimSpace(form.Get("unique_for"))}
	a, err := u.resolveWorker(ctx, "assigned_to", form.Get("assigned_to"))
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.renderNewTask(c, status, typeID, form, fe)
	}
	if a != "" {
		req.AssignedTo = &a
	}
	if at := strings.TrimSpace(form.Get("run_at")); at != "" {
		req.RunAt = &at
	}
	err = nil
	if id, perr := uuidField("task_type_id", typeID); perr == nil {
		tt, gerr := u.db.GetTaskType(ctx, u.db.Pool(), id)
		if gerr == nil {
			fields, rawOnly := schemaFields(tt.ParamSchema)
			req.Params, err = formParams(fields, rawOnly, form)
		}
	}
	var t *events.Task
	if err == nil {
		t, _, err = u.api.CreateTask(ctx, req, actor(c))
	}
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.renderNewTask(c, status, typeID, form, fe)
	}
	return c.Redirect(http.StatusSeeOther, "/tasks/"+t.ID)
}
