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
	"github.com/clawdbot/task-service/store"
)

// schemaField is one input of the new-task form, made from a property of
// the type's JSON Schema.
type schemaField struct {
	Name        string
	Kind        string // string, number, integer, boolean, enum, strings or json
	Required    bool
	Enum        []string
	Description string
	Value       string
	Error       string
}

type newTaskData struct {
	Types   []events.TaskType
	Type    *events.TaskType
	Fields  []schemaField
	RawOnly bool // the schema has no properties: one JSON field for all params
	Workers []store.WorkerRef
	Prios   []events.Priority
	Form    url.Values
	Errors  formErrors
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
	if d.Workers, err = u.db.Workers(ctx); err != nil {
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

// schemaFields reads the flat properties of a JSON Schema object; anything
// else becomes a raw JSON field. rawOnly when there are no properties.
func schemaFields(raw json.RawMessage) (fields []schemaField, rawOnly bool) {
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Enum        []any  `json:"enum"`
			Description string `json:"description"`
			Items       *struct {
				Type any `json:"type"`
			} `json:"items"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Properties) == 0 {
		return nil, true
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for name, p := range s.Properties {
		f := schemaField{Name: name, Required: required[name], Description: p.Description, Kind: "json"}
		typ, _ := p.Type.(string)
		switch {
		case len(p.Enum) > 0:
			f.Kind = "enum"
			for _, e := range p.Enum {
				str, ok := e.(string)
				if !ok {
					f.Kind, f.Enum = "json", nil
					break
				}
				f.Enum = append(f.Enum, str)
			}
		case typ == "string", typ == "number", typ == "integer", typ == "boolean":
			f.Kind = typ
		case typ == "array" && p.Items != nil && p.Items.Type == "string":
			f.Kind = "strings"
		}
		fields = append(fields, f)
	}
	sort.Slice(fields, func(i, j int) bool {
		if fields[i].Required != fields[j].Required {
			return fields[i].Required
		}
		return fields[i].Name < fields[j].Name
	})
	return fields, false
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
				out[f.Name] = true
			} else if f.Required {
				out[f.Name] = false
			}
			continue
		}
		if strings.TrimSpace(v) == "" {
			continue
		}
		switch f.Kind {
		case "integer":
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				out[f.Name] = n
			} else {
				out[f.Name] = v
			}
		case "number":
			if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				out[f.Name] = n
			} else {
				out[f.Name] = v
			}
		case "strings":
			items := []string{}
			for _, line := range strings.Split(v, "\n") {
				if line = strings.TrimSpace(line); line != "" {
					items = append(items, line)
				}
			}
			out[f.Name] = items
		case "json":
			x, err := formValueJSON("params."+f.Name, v)
			if err != nil {
				return nil, err
			}
			out[f.Name] = x
		default:
			out[f.Name] = v
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	return b, nil
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
	if a := form.Get("assigned_to"); a != "" {
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
