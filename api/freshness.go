package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Freshness rules: tasks created on their own for the keys of a watchlist
// whose data is stale (ADR 023). The commands below are called by the JSON
// handlers and by the admin UI.

// FreshnessRuleRequest creates a rule, or edits one: in an edit every field
// is optional and a field left out keeps its value.
type FreshnessRuleRequest struct {
	FreshnessRuleEdit
	// Keys is the watchlist (create only; replace it with PUT .../keys).
	Keys []events.FreshnessKey `json:"keys,omitempty"`
}

// FreshnessRuleEdit is what an edit (PUT) takes: a rule's fields but its
// keys.
type FreshnessRuleEdit struct {
	Name       string `json:"name,omitempty" openapi:"maxLength=200"`
	TaskTypeID string `json:"task_type_id,omitempty" openapi:"format=uuid"`
	// TitleTemplate is the title of each key's task, e.g. "Reddit crawl for {{key}}".
	TitleTemplate string `json:"title_template,omitempty"`
	// ParamsTemplate is a JSON object with {{key}} inside its strings, e.g.
	// {"ticker": "{{key}}"} (or that object's text as a JSON string).
	ParamsTemplate json.RawMessage `json:"params_template,omitempty"`
	// MaxAge: a key whose newest completed task is older gets a task, e.g. "6h" or "90m".
	MaxAge      string                     `json:"max_age,omitempty" openapi:"duration=$freshnessMinAge..8784h,wholeSeconds,maxLength=100" doc:"a duration such as 6h, 90m or 30s: at least the shortest (FRESHNESS_MIN_AGE), at most 366 days"`
	Thresholds  *events.PriorityThresholds `json:"thresholds,omitempty"`
	RisingBoost *float64                   `json:"rising_boost,omitempty" openapi:"min=1,max=100" doc:"default 2"`
}

// FreshnessKeysRequest is the whole new watchlist.
type FreshnessKeysRequest struct {
	Keys []events.FreshnessKey `json:"keys" openapi:"required"`
}

// apply writes the fields given onto spec; errors name the field.
func (r FreshnessRuleRequest) apply(spec *events.FreshnessSpec) error {
	if r.Name != "" {
		spec.Name = r.Name
	}
	if r.TaskTypeID != "" {
		spec.TaskTypeID = r.TaskTypeID
	}
	if r.TitleTemplate != "" {
		spec.TitleTemplate = r.TitleTemplate
	}
	if len(r.ParamsTemplate) > 0 {
		text := string(r.ParamsTemplate)
		if r.ParamsTemplate[0] == '"' {
			if err := json.Unmarshal(r.ParamsTemplate, &text); err != nil {
				return events.Invalid("params_template", "is not a JSON string")
			}
		}
		spec.ParamsTemplate = text
	}
	if r.MaxAge != "" {
		d, err := time.ParseDuration(r.MaxAge)
		if err != nil {
			return events.Invalid("max_age", "is not a duration such as 6h, 90m or 30s")
		}
		if d%time.Second != 0 {
			return events.Invalid("max_age", "must be whole seconds")
		}
		spec.MaxAgeSeconds = int64(d / time.Second)
		if d < 0 {
			spec.MaxAgeSeconds = -1 // Validate names it
		}
	}
	if r.Thresholds != nil {
		spec.Thresholds = *r.Thresholds
	}
	if r.RisingBoost != nil {
		if b := *r.RisingBoost; b < 1 || b > 100 { // 0 would read as "the default"
			return events.Invalid("rising_boost", "must be between 1 and 100")
		}
		spec.RisingBoost = *r.RisingBoost
	}
	return nil
}

// CreateFreshnessRule defines a rule with its watchlist.
func (s *Server) CreateFreshnessRule(ctx context.Context, req FreshnessRuleRequest, meta events.Meta) (*events.FreshnessRule, error) {
	var spec events.FreshnessSpec
	if err := req.apply(&spec); err != nil {
		return nil, err
	}
	if req.MaxAge == "" {
		return nil, events.Invalid("max_age", "is required, e.g. 6h")
	}
	return s.db.CreateFreshnessRule(ctx, spec, req.Keys, s.paramsCheck, meta)
}

// UpdateFreshnessRule edits rule id with the fields req gives.
func (s *Server) UpdateFreshnessRule(ctx context.Context, id string, req FreshnessRuleRequest, meta events.Meta) (*events.FreshnessRule, error) {
	if req.Keys != nil {
		return nil, events.Invalid("keys", "cannot be edited here: PUT /api/v1/admin/freshness-rules/{id}/keys replaces them")
	}
	return s.db.UpdateFreshnessRule(ctx, id, req.apply, s.paramsCheck, meta)
}

// ReplaceFreshnessKeys makes keys the rule's whole watchlist.
func (s *Server) ReplaceFreshnessKeys(ctx context.Context, id string, keys []events.FreshnessKey, meta events.Meta) (*events.FreshnessRule, error) {
	return s.db.ReplaceFreshnessKeys(ctx, id, keys, s.paramsCheck, meta)
}

// FreshnessRuleJSON decodes a rule request as strictly as the API does
// (the admin UI's form is turned into one).
func FreshnessRuleJSON(body []byte) (FreshnessRuleRequest, error) {
	var req FreshnessRuleRequest
	err := decodeJSON(bytes.NewReader(body), &req, false)
	return req, err
}

func (s *Server) createFreshnessRule(c echo.Context) error {
	var req FreshnessRuleRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	r, err := s.CreateFreshnessRule(c.Request().Context(), req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, r)
}

func (s *Server) listFreshnessRules(c echo.Context) error {
	list, err := s.db.ListFreshnessRules(c.Request().Context())
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, list)
}

func (s *Server) getFreshnessRule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	r, err := s.db.GetFreshnessRule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, r)
}

func (s *Server) updateFreshnessRule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req FreshnessRuleRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	r, err := s.UpdateFreshnessRule(c.Request().Context(), id, req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, r)
}

func (s *Server) deleteFreshnessRule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	r, err := s.db.GetFreshnessRule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if err := s.db.DeleteFreshnessRule(c.Request().Context(), id, actor(c, events.ActorAdmin)); err != nil {
		return err
	}
	return ok(c, http.StatusOK, r)
}

func (s *Server) pauseFreshnessRule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req scheduleReasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	r, err := s.db.PauseFreshnessRule(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, r)
}

func (s *Server) resumeFreshnessRule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	r, err := s.db.ResumeFreshnessRule(c.Request().Context(), id, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, r)
}

func (s *Server) replaceFreshnessKeys(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req FreshnessKeysRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	if req.Keys == nil {
		return events.Invalid("keys", "is required (an empty list stops watching every key)")
	}
	r, err := s.ReplaceFreshnessKeys(c.Request().Context(), id, req.Keys, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, r)
}

func (s *Server) listFreshnessKeys(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	limit, err := intQueryParam(c, "limit", 1, store.MaxFreshnessKeyPage, 100)
	if err != nil {
		return err
	}
	keys, err := s.db.FreshnessKeys(c.Request().Context(), id, c.QueryParam("after"), limit)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, keys)
}

// MaxFreshnessBodyBytes bounds a rule's body: 10,000 keys fit.
const MaxFreshnessBodyBytes = 4 << 20

// freshnessRoutes are the freshness rules' rows of the route table.
func (s *Server) freshnessRoutes() []route {
	const p = "/api/v1/admin/freshness-rules"
	const bad, notFound, conflict, okay = http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusOK
	const tag = "freshness"
	large := http.StatusRequestEntityTooLarge
	return []route{
		{method: http.MethodPost, path: p, id: "createFreshnessRule", idempotent: true, summary: "Create a freshness rule: a task type, a watchlist of keys with weights, title and params templates filled with each key, and a max age; a key whose newest completed task is older (and that has none open) gets a task", role: roleAdmin, handler: s.createFreshnessRule, tag: tag,
			request: FreshnessRuleRequest{}, status: http.StatusCreated, response: events.FreshnessRule{}, errors: []int{bad, conflict, large}, bodyLimit: MaxFreshnessBodyBytes},
		{method: http.MethodGet, path: p, id: "listFreshnessRules", summary: "List freshness rules, newest first (at most 500)", role: roleAdmin, handler: s.listFreshnessRules, tag: tag,
			status: okay, response: []events.FreshnessRule{}, errors: []int{}},
		{method: http.MethodGet, path: p + "/:id", id: "getFreshnessRule", summary: "Read a freshness rule", role: roleAdmin, handler: s.getFreshnessRule, tag: tag,
			status: okay, response: events.FreshnessRule{}, errors: []int{bad, notFound}},
		{method: http.MethodPut, path: p + "/:id", id: "updateFreshnessRule", summary: "Edit a freshness rule: the fields given replace the current ones (not its task type, not its keys)", role: roleAdmin, handler: s.updateFreshnessRule, tag: tag,
			request: FreshnessRuleEdit{}, status: okay, response: events.FreshnessRule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodDelete, path: p + "/:id", id: "deleteFreshnessRule", summary: "Delete a freshness rule: its keys stop being watched (their open tasks stay); answers the rule as it was", role: roleAdmin, handler: s.deleteFreshnessRule, tag: tag,
			status: okay, response: events.FreshnessRule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: p + "/:id/pause", id: "pauseFreshnessRule", summary: "Pause a freshness rule: no tasks are created for its keys", role: roleAdmin, handler: s.pauseFreshnessRule, tag: tag,
			request: scheduleReasonRequest{}, emptyBody: true, status: okay, response: events.FreshnessRule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: p + "/:id/resume", id: "resumeFreshnessRule", summary: "Resume a paused freshness rule: keys already stale get their tasks at once", role: roleAdmin, handler: s.resumeFreshnessRule, tag: tag,
			status: okay, response: events.FreshnessRule{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPut, path: p + "/:id/keys", id: "replaceFreshnessKeys", summary: "Replace a freshness rule's whole watchlist (up to 10,000 keys): kept keys keep their state, new ones are due at once", role: roleAdmin, handler: s.replaceFreshnessKeys, tag: tag,
			request: FreshnessKeysRequest{}, status: okay, response: events.FreshnessRule{}, errors: []int{bad, notFound, conflict, large}, bodyLimit: MaxFreshnessBodyBytes},
		{method: http.MethodGet, path: p + "/:id/keys", id: "listFreshnessKeys", summary: "A freshness rule's keys by key, with each one's last completion, age, open task and next due time", role: roleAdmin, handler: s.listFreshnessKeys, tag: tag,
			query: []param{
				stringParam("after", "the last key of the previous page"),
				intParam("limit", 1, store.MaxFreshnessKeyPage, "page size (default 100)"),
			},
			status: okay, response: []store.FreshnessKeyView{}, errors: []int{bad, notFound}},
	}
}
