package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawdbot/task-service/events"
)

var pathParam = regexp.MustCompile(`:([a-z_]+)`)

// Media types of success bodies that are not the JSON envelope.
const (
	mediaEventStream = "text/event-stream"
	mediaText        = "text/plain"
	mediaHTML        = "text/html"
	// mediaDownload is task data as stored: one of passiveTypes.
	mediaDownload = "download"
)

// param is one query parameter of a route: its name, what it means and its
// JSON Schema (type, format, range, enum), as the handler enforces them.
type param struct {
	name, doc string
	schema    map[string]any
	// asJSON: the value is JSON text (content application/json), such as
	// the what-if policy, an object no query style can carry.
	asJSON bool
}

func intParam(name string, min, max int, doc string) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "integer", "minimum": min, "maximum": max}}
}

func boolParam(name, doc string) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "boolean", "default": false}}
}

func uuidParam(name, doc string) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "string", "format": "uuid"}}
}

func timeParam(name, doc string) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "string", "format": "date-time"}}
}

func stringParam(name, doc string) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "string"}}
}

func patternParam(name, pattern string, maxLength int, doc string) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "string", "pattern": pattern, "maxLength": maxLength}}
}

func enumParam[T ~string](name, doc string, values ...T) param {
	return param{name: name, doc: doc, schema: map[string]any{"type": "string", "enum": values}}
}

// orNull marks a response whose data may be null (a claim that found nothing).
type orNull struct{ of any }

// oneOf is a response whose data is one of these types (chosen by a query
// parameter), e.g. a task's detail or, with at=, the bare task.
type oneOf []any

// automatic statuses every route may answer besides its own errors: the
// auth middleware's 401 and 403, 408, 413 and 415 for bodies, 500 for
// anything.
func (r route) statuses() []int {
	// 400 for query parameters (every route refuses unknown ones) and 503
	// while the database is away (edges.go).
	set := map[int]bool{http.StatusInternalServerError: true, http.StatusBadRequest: true, http.StatusServiceUnavailable: true}
	for _, s := range r.errors {
		set[s] = true
	}
	if r.role != rolePublic {
		set[http.StatusUnauthorized], set[http.StatusForbidden] = true, true
	}
	if r.idempotent {
		set[http.StatusUnprocessableEntity] = true // idempotency_key_reused
	}
	if strings.Contains(r.path, "/:") {
		// A parameter's value that names a static route beside it (PUT
		// .../task-types for PUT .../{id}) is that route, asked with a
		// method it lacks (refuseWrongMethod).
		set[http.StatusMethodNotAllowed] = true
	}
	// Bodies: the edge guard (guardBody) bounds any route's body, also of
	// the writes that take none.
	if r.request != nil || !r.rawBody && r.method != http.MethodGet && r.method != http.MethodHead {
		set[http.StatusRequestEntityTooLarge] = true
		set[http.StatusUnsupportedMediaType], set[http.StatusRequestTimeout] = true, true
	}
	out := make([]int, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// errorResponses names the reusable error response of each status.
var errorResponses = map[int]string{
	http.StatusBadRequest:            "BadRequest",
	http.StatusUnauthorized:          "Unauthorized",
	http.StatusForbidden:             "Forbidden",
	http.StatusNotFound:              "NotFound",
	http.StatusMethodNotAllowed:      "MethodNotAllowed",
	http.StatusConflict:              "Conflict",
	http.StatusRequestEntityTooLarge: "TooLarge",
	http.StatusUnsupportedMediaType:  "UnsupportedMediaType",
	http.StatusRequestTimeout:        "RequestTimeout",
	http.StatusTooManyRequests:       "TooManyRequests",
	http.StatusUnprocessableEntity:   "Unprocessable",
	http.StatusInternalServerError:   "Internal",
	http.StatusServiceUnavailable:    "Unavailable",
}

// errorCodes are the values of error.code, one per kind of failure.
var errorCodes = []string{
	"bad_request", "validation_failed", "duplicate", "not_found", "invalid_transition", "conflict",
	"forbidden", "unauthenticated", "too_large", "method_not_allowed", "rate_limited",
	"unavailable", "internal", "unsupported_media_type", "timeout", "incomplete_body",
	"duplicate_task", "idempotency_key_reused", "unknown_reference",
}

// enums lists the values of the named string types responses carry.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[events.Status]():    {"blocked", "pending", "in_progress", "completed", "failed", "cancelled"},
	reflect.TypeFor[events.Priority]():  {"urgent", "high", "medium", "low"},
	reflect.TypeFor[events.ActorKind](): {"admin", "worker", "system", "telegram"},
}

// apiVersion is the document's info.version: the contract's, not the build's.
const apiVersion = "1.0.0"

// OpenAPI builds the document from the route table, so it cannot drift from
// what is registered (a test checks that against the router; the API tests
// validate every response against it).
func (s *Server) OpenAPI() map[string]any {
	g := &docGen{schemas: map[string]any{}, names: map[string]reflect.Type{}, errorsUsed: map[int]bool{},
		limits: s.docLimits()}
	paths := map[string]map[string]any{}
	tags := map[string]bool{}
	for _, r := range s.routes {
		p := pathParam.ReplaceAllString(r.path, "{$1}")
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		tag := r.tagName()
		tags[tag] = true
		op := map[string]any{
			"operationId": r.id,
			"summary":     r.summary,
			"tags":        []string{tag},
			"responses":   g.responses(r),
		}
		if r.role == rolePublic {
			op["security"] = []any{}
		} else {
			op["description"] = "Requires the " + r.role + " role."
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(r.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true,
				"description": "the " + strings.TrimSuffix(tag, "s") + "'s id",
				"schema":      map[string]any{"type": "string", "format": "uuid"}})
		}
		for _, q := range r.query {
			pm := map[string]any{"name": q.name, "in": "query", "description": q.doc, "schema": q.schema}
			if q.asJSON {
				delete(pm, "schema")
				pm["content"] = jsonContent(q.schema)
			}
			if q.schema["type"] == "array" {
				pm["style"], pm["explode"] = "form", true
			}
			params = append(params, pm)
		}
		if r.idempotent {
			params = append(params, map[string]any{"name": idempotencyHeader, "in": "header",
				"description": "a key of your choice (1-255 printable ASCII characters, a UUID say): the same key and body within 24 hours answer the first answer again (header Idempotent-Replayed: true) and create nothing; the same key with another request is a 422 idempotency_key_reused",
				"schema":      map[string]any{"type": "string", "minLength": 1, "maxLength": maxIdempotencyKey}})
		}
		if r.media == mediaEventStream {
			params = append(params, map[string]any{"name": "Last-Event-ID", "in": "header",
				"description": "the id of the last event received: a reconnecting client resumes after it",
				"schema":      map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if r.rawBody {
			// A raw body's name and kind travel as query parameters, which
			// OpenAPI 3.0 cannot require for one media type only: the
			// extension says it (ADR 029); a multipart body's data_type
			// may be a field instead.
			op["x-required-query-by-media-type"] = map[string]any{"application/octet-stream": []string{"data_type", "filename"}}
			binary := map[string]any{"type": "string", "format": "binary"}
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/octet-stream": map[string]any{"schema": binary},
				"multipart/form-data": map[string]any{"schema": map[string]any{"type": "object", "properties": map[string]any{
					"data_type": map[string]any{"type": "string"},
					"file":      map[string]any{"type": "array", "items": binary},
				}}},
			}}
		}
		if r.request != nil {
			op["requestBody"] = map[string]any{"required": !r.emptyBody,
				"content": jsonContent(g.schema(reflect.TypeOf(r.request), true))}
		}
		paths[p][strings.ToLower(r.method)] = op
	}
	var tagList []any
	for _, t := range sortedSet(tags) {
		tagList = append(tagList, map[string]any{"name": t, "description": tagDocs[t]})
	}
	codes := map[string]any{"type": "string", "enum": errorCodes}
	g.schemas["ErrorCode"] = codes
	g.schemas["Error"] = map[string]any{
		"type": "object", "description": "The envelope of every error answer.",
		"required": []string{"success", "error"}, "additionalProperties": false,
		"properties": map[string]any{
			"success": map[string]any{"type": "boolean", "enum": []bool{false}},
			"data": map[string]any{"type": "object", "nullable": true, "additionalProperties": map[string]any{"type": "string"},
				"description": "null, except from /readyz: each dependency's state"},
			"error": map[string]any{"type": "object", "required": []string{"code", "message"}, "additionalProperties": false,
				"properties": map[string]any{
					"code":    ref("ErrorCode"),
					"message": map[string]any{"type": "string"},
					"field":   map[string]any{"type": "string", "description": "the field, JSON path or parameter at fault"},
					"details": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
						"description": "what a client acts on: existing_task_id for duplicate_task"},
				}},
		},
	}
	addExamples(paths, g.schemas)
	responses := map[string]any{}
	for status, name := range errorResponses {
		if !g.errorsUsed[status] {
			continue
		}
		headers := requestIDHeader()
		if status == http.StatusMethodNotAllowed {
			headers["Allow"] = map[string]any{"description": "the methods the path has", "schema": map[string]any{"type": "string"}}
		}
		responses[name] = map[string]any{"description": http.StatusText(status),
			"headers": headers, "content": jsonContent(ref("Error"))}
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "task-service",
			"version":     apiVersion,
			"description": "An event-sourced task queue for fleets of AI-agent workers. Every answer is an envelope: `{\"success\": true, \"data\": ...}` or `{\"success\": false, \"error\": {\"code\", \"message\", \"field\"}}`. Log in with POST /api/v1/auth/login and send the token as `Authorization: Bearer <token>`.",
			"license":     map[string]any{"name": "MIT", "url": "https://opensource.org/licenses/MIT"},
		},
		"servers":  []any{map[string]any{"url": "/", "description": "this server"}},
		"security": []any{map[string]any{"bearer": []string{}}},
		"tags":     tagList,
		"paths":    paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
			"schemas":         g.schemas,
			"responses":       responses,
			"headers": map[string]any{"X-Request-Id": map[string]any{
				"description": "the request's id; quote it when reporting a failure",
				"schema":      map[string]any{"type": "string"}}},
		},
	}
}

var tagDocs = map[string]string{
	"auth":       "Logging in",
	"worker":     "A worker's claim loop: heartbeat, claim, report, finish",
	"workers":    "Worker accounts and the fleet's activity",
	"fleet":      "Capacity and statistics",
	"task-types": "Task types: what a task must carry and how it is retried",
	"tasks":      "Tasks as admins see and steer them",
	"events":     "The event log: pages and a live tail",
	"telegram":   "Commands from Telegram: the bot's webhook",
	"data":       "Task data: files workers upload, admins and later attempts download",
	"operations": "Health, readiness, metrics and this document",
	"schedules":  "Recurring work: schedules that create tasks on their own",
	"usage":      "LLM usage: what workers report, its totals, and the budgets that pause a type",
	"freshness":  "Freshness rules: a watchlist of keys whose stale data gets a task on its own",
	"workflows":  "Workflows: a graph of tasks created at once, each waiting for its dependencies",
	"replay":     "What-if replay: a changed retry and offline policy re-run over the recorded events",
}

// tagName is the route's tag, or the first fixed path segment after the
// API prefix ("tasks" for /api/v1/admin/workers/tasks/:id).
func (r route) tagName() string {
	if r.tag != "" {
		return r.tag
	}
	rest := strings.TrimPrefix(r.path, "/api/v1/")
	rest = strings.TrimPrefix(rest, "admin/")
	segs := strings.Split(rest, "/")
	if segs[0] == "workers" && len(segs) > 1 && !strings.HasPrefix(segs[1], ":") {
		return segs[1]
	}
	return segs[0]
}

func requestIDHeader() map[string]any {
	return map[string]any{"X-Request-Id": map[string]any{"$ref": "#/components/headers/X-Request-Id"}}
}

func (g *docGen) responses(r route) map[string]any {
	out := map[string]any{}
	ok := map[string]any{"description": http.StatusText(r.status), "headers": requestIDHeader()}
	switch r.media {
	case "":
		data := r.response
		nullable := false
		if n, isNull := data.(orNull); isNull {
			data, nullable = n.of, true
		}
		var ds map[string]any
		if alts, isOneOf := data.(oneOf); isOneOf {
			var list []any
			for _, alt := range alts {
				list = append(list, g.schema(reflect.TypeOf(alt), false))
			}
			ds = map[string]any{"oneOf": list}
		} else {
			ds = g.schema(reflect.TypeOf(data), false)
		}
		if nullable {
			ds = nullableRef(ds)
		}
		ok["content"] = jsonContent(map[string]any{
			"type": "object", "required": []string{"success", "data"}, "additionalProperties": false,
			"properties": map[string]any{"success": map[string]any{"type": "boolean", "enum": []bool{true}}, "data": ds},
		})
	case "application/json": // a JSON body that is not the envelope (this document)
		ok["content"] = jsonContent(map[string]any{"type": "object"})
	case mediaDownload:
		ok["content"] = downloadContent()
	default:
		ok["content"] = map[string]any{r.media: map[string]any{"schema": map[string]any{"type": "string"}}}
	}
	out[strconv.Itoa(r.status)] = ok
	for _, st := range r.also {
		extra := map[string]any{"description": http.StatusText(st), "headers": requestIDHeader()}
		switch st {
		case http.StatusPartialContent:
			extra["content"] = ok["content"]
		case http.StatusOK: // a creation that found its thing already there (on_duplicate "existing")
			extra["description"] = "Already there: nothing was created"
			extra["content"] = ok["content"]
		case http.StatusFound:
			extra["headers"] = map[string]any{"Location": map[string]any{"description": "where to download it from", "schema": map[string]any{"type": "string"}}}
		}
		out[strconv.Itoa(st)] = extra
	}
	for _, st := range r.statuses() {
		if errorResponses[st] == "" {
			panic(fmt.Sprintf("api: route %s lists error %d, which has no response in errorResponses", r.id, st))
		}
		g.errorsUsed[st] = true
		out[strconv.Itoa(st)] = map[string]any{"$ref": "#/components/responses/" + errorResponses[st]}
	}
	return out
}

// downloadContent lists every type a download is served with
// (servedContentType): a client generator drops a body typed */*.
func downloadContent() map[string]any {
	out := map[string]any{}
	for _, mt := range sortedSet(passiveTypes) {
		schema := map[string]any{"type": "string", "format": "binary"}
		if mt == echo.MIMEApplicationJSON {
			schema = anyJSON()
		}
		out[mt] = map[string]any{"schema": schema}
	}
	return out
}

func (s *Server) openapi(c echo.Context) error { return c.JSON(http.StatusOK, s.OpenAPI()) }

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func jsonContent(schema any) map[string]any {
	return map[string]any{"application/json": map[string]any{"schema": schema}}
}

// docGen turns Go types into schemas; named structs become components.
type docGen struct {
	schemas    map[string]any
	names      map[string]reflect.Type
	errorsUsed map[int]bool
	limits     docLimits
}

// docLimits are the settings the document states: a request's bounds that
// an operator may change.
type docLimits struct {
	scheduleMinInterval time.Duration
	freshnessMinAge     time.Duration
}

func (s *Server) docLimits() docLimits {
	l := docLimits{scheduleMinInterval: events.DefaultMinInterval, freshnessMinAge: events.DefaultMinFreshAge}
	if s.db != nil {
		l.scheduleMinInterval, l.freshnessMinAge = s.db.ScheduleMinInterval(), s.db.FreshnessMinAge()
	}
	return l
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// schema describes t as encoding/json writes it. A request (in) is
// described by its openapi tags: required fields are tagged, since a
// missing field often has a default; a response lists every field that is
// always written (no omitempty) as required, and pointers as nullable.
func (g *docGen) schema(t reflect.Type, in bool) map[string]any {
	if t == nil {
		panic("api: a route without a response type; set response (see routes.go)")
	}
	if vals, found := enums[t]; found {
		return map[string]any{"type": "string", "enum": vals}
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		// encoding/json's raw values: objects here (params, metadata,
		// event data), unless a field's tag says openapi:"any". A request
		// leaves an object out rather than send null (decode refuses it).
		if in {
			return map[string]any{"type": "object", "additionalProperties": true}
		}
		return map[string]any{"type": "object", "nullable": true, "additionalProperties": true}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := g.schema(t.Elem(), in)
		if in {
			return s
		}
		if _, isRef := s["$ref"]; isRef {
			return nullableRef(s)
		}
		return nullable(s)
	case reflect.String:
		if in {
			// PostgreSQL's text holds no NUL: a request's text may not carry one.
			return map[string]any{"type": "string", "pattern": noNULPattern}
		}
		return map[string]any{"type": "string"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Float64, reflect.Float32:
		return map[string]any{"type": "number"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Slice:
		out := map[string]any{"type": "array", "items": g.schema(t.Elem(), in)}
		if b, bounded := reflect.Zero(t).Interface().(itemBounds); bounded {
			out["minItems"], out["maxItems"] = b.itemBounds()
		}
		if u, keyed := reflect.Zero(t).Interface().(interface{ uniqueBy() string }); keyed {
			out["x-unique-by"] = u.uniqueBy()
		}
		return out
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem(), in)}
	case reflect.Struct:
		return g.structSchema(t, in)
	}
	panic(fmt.Sprintf("api: no schema for %s", t))
}

func (g *docGen) structSchema(t reflect.Type, in bool) map[string]any {
	name := t.Name()
	if name == "" || in {
		return g.object(t, in)
	}
	name = strings.ToUpper(name[:1]) + name[1:]
	// Generators name each operation's answer <OperationId>Response
	// (oapi-codegen's LoginResponse): a schema must not take that name.
	if base, found := strings.CutSuffix(name, "Response"); found {
		name = base + "Result"
	}
	if prev, seen := g.names[name]; seen {
		if prev != t {
			panic(fmt.Sprintf("api: two response types named %s: %s and %s", name, prev, t))
		}
		return ref(name)
	}
	g.names[name] = t
	g.schemas[name] = map[string]any{} // placeholder against recursion
	g.schemas[name] = g.object(t, in)
	return ref(name)
}

// itemBounds is a list body's least and most items.
type itemBounds interface{ itemBounds() (min, max int) }

// createNeeds marks a create request whose type an edit shares in part:
// the fields a create must carry that its tags leave optional.
type createNeeds interface{ createNeeds() []string }

// crossRules marks a request with rules across its fields: each schema it
// returns matches a combination the server refuses. The document states
// them as "not": {"anyOf": [...]}, which JSON Schema validators (and the
// contract fuzz test) apply and client generators ignore: their types stay
// the plain object.
type crossRules interface{ forbidden(l docLimits) []any }

// openObject marks a type whose objects carry more fields than it reads:
// another party's objects (Telegram's), which grow over time.
type openObject interface{ openObject() }

// object lists t's fields, embedded structs flattened as encoding/json does.
func (g *docGen) object(t reflect.Type, in bool) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, in, props, &required)
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if t.Implements(reflect.TypeFor[openObject]()) {
		out["additionalProperties"] = true
	}
	if in {
		if c, needs := reflect.Zero(t).Interface().(createNeeds); needs {
			required = append(required, c.createNeeds()...)
		}
		if c, rules := reflect.Zero(t).Interface().(crossRules); rules {
			out["not"] = map[string]any{"anyOf": c.forbidden(g.limits)}
		}
	}
	if required != nil {
		sort.Strings(required)
		out["required"] = required
	}
	return out
}

func (g *docGen) fields(t reflect.Type, in bool, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, embedded := jsonName(f)
		if embedded {
			g.fields(f.Type, in, props, required)
			continue
		}
		if name == "" {
			continue
		}
		_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		s := g.schema(f.Type, in)
		rules := parseRules(f.Tag.Get("openapi"))
		if len(rules) > 0 || f.Tag.Get("doc") != "" {
			s = g.withRules(s, rules, f.Tag.Get("doc"))
		}
		props[name] = s
		if in && rules["required"] != "" || !in && !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}

// parseRules reads an openapi tag: required,enum=a|b,min=1,max=9,maxLength=99,format=uuid,itemFormat=uuid.
// A pattern comes last: it may hold commas ({1,16}), so it takes the rest.
func parseRules(tag string) map[string]string {
	out := map[string]string{}
	if before, pattern, found := strings.Cut(tag, "pattern="); found && (before == "" || strings.HasSuffix(before, ",")) {
		out["pattern"] = pattern
		tag = strings.TrimSuffix(before, ",")
	}
	for _, part := range strings.Split(tag, ",") {
		if part == "" {
			continue
		}
		k, v, found := strings.Cut(part, "=")
		if !found {
			v = "true"
		}
		out[k] = v
	}
	return out
}

func (g *docGen) withRules(s map[string]any, rules map[string]string, doc string) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		out[k] = v
	}
	if doc != "" {
		out["description"] = doc
	}
	for k, v := range rules {
		switch k {
		case "required":
		case "any":
			out = anyJSON()
			if doc != "" {
				out["description"] = doc
			}
		case "anyNotNull":
			out = anyJSON()
			delete(out["anyOf"].([]any)[0].(map[string]any), "nullable")
			if doc != "" {
				out["description"] = doc
			}
		case "nonblank": // the server trims spaces before it checks
			out["pattern"] = nonBlankText
			if out["minLength"] == nil {
				out["minLength"] = 1
			}
		case "nonblankOrEmpty": // empty for none, else not only spaces
			out["pattern"] = "^(" + strings.TrimSuffix(strings.TrimPrefix(nonBlankText, "^"), "$") + ")?$"
		case "pattern":
			out["pattern"] = v
		case "enum":
			out["enum"] = strings.Split(v, "|")
			delete(out, "pattern") // the values say it
			if out["nullable"] == true {
				out = nullable(out)
			}
		case "format":
			out["format"] = v
			if out["pattern"] == noNULPattern {
				delete(out, "pattern") // the format says it
			}
		// Rules JSON Schema cannot state, as extensions the contract fuzz
		// test reads (ADR 029): a value compared with a sibling's, a
		// duration's bounds, a list's items unique by one member.
		case "greater":
			out["x-greater-than"] = v
		case "atLeast":
			out["x-at-least"] = v
		case "exclusiveMin": // below, once min is read
		case "uniqueBy":
			out["x-unique-by"] = v
		case "duration": // MIN..MAX, Go durations; $freshnessMinAge is the setting
			if out["pattern"] == noNULPattern {
				delete(out, "pattern") // the format says it
			}
			lo, hi, _ := strings.Cut(v, "..")
			if lo == "$freshnessMinAge" {
				lo = shortDuration(g.limits.freshnessMinAge)
			}
			if out["format"] == nil {
				out["format"] = "go-duration"
			}
			if lo != "" {
				out["x-duration-min"] = lo
			}
			if hi != "" {
				out["x-duration-max"] = hi
			}
		case "wholeSeconds":
			out["x-whole-seconds"] = true
		case "uniqueItems":
			out["uniqueItems"] = true
		case "itemFormat": // a list of UUIDs, say
			items := map[string]any{}
			for k, v := range out["items"].(map[string]any) {
				items[k] = v
			}
			items["format"] = v
			if items["pattern"] == noNULPattern {
				delete(items, "pattern")
			}
			out["items"] = items
		case "min", "max", "maxLength", "minLength", "maxItems", "minItems":
			key := map[string]string{"min": "minimum", "max": "maximum"}[k]
			if key == "" {
				key = k
			}
			if n, err := strconv.Atoi(v); err == nil {
				out[key] = n
			} else if f, err := strconv.ParseFloat(v, 64); err == nil && key != k {
				out[key] = f // a bound of a number, such as 0.01 dollars
			} else {
				panic(fmt.Sprintf("api: openapi tag %s=%s is not a number", k, v))
			}
		default:
			panic("api: unknown openapi tag rule " + k)
		}
	}
	if rules["exclusiveMin"] != "" {
		// Above min: "not" the bound, since 3.0's boolean exclusiveMinimum
		// is 3.1's number, and tools read it either way.
		out["not"] = map[string]any{"enum": []any{out["minimum"]}}
	}
	return out
}

// shortDuration writes d as people do: 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	out := d.String()
	for _, cut := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(out, cut) {
			out = strings.TrimSuffix(out, cut[1:])
		}
	}
	return out
}

// noNULPattern is any text without the NUL character, which PostgreSQL's
// text cannot hold (the server refuses it in any JSON string, jsoncheck.go).
const noNULPattern = "^[^\x00]*$"

// nonBlankText is text with a character that is not white space
// (nonBlankPattern) and no NUL.
const nonBlankText = "^[^\x00]*" + nonBlankPattern + "[^\x00]*$"

// nonBlankPattern matches text with a character that is not white space
// as strings.TrimSpace sees it. RE2's \s (and so \S) knows only ASCII
// spaces, so the others are listed, as themselves: the pattern reads the
// same in Go, ECMAScript and Python.
const nonBlankPattern = "[^\\s\v\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"

// nullableRef is s or null. OpenAPI 3.0 cannot put nullable beside $ref;
// anyOf with nullable is what client generators read as "this or null"
// (allOf with nullable made Python's openapi-python-client refuse null),
// and the type beside nullable is what Redocly asks for.
// x-go-type keeps oapi-codegen's Go type the referenced struct (a pointer,
// being nullable) instead of an opaque union; other generators ignore it.
func nullableRef(s map[string]any) map[string]any {
	out := map[string]any{"type": "object", "nullable": true, "anyOf": []any{s}}
	if r, isRef := s["$ref"].(string); isRef {
		out["x-go-type"] = strings.TrimPrefix(r, "#/components/schemas/")
	}
	return out
}

// nullable is s or null. An enum lists null among its values, or
// generators that check values against it refuse the null; oapi-codegen
// would make that null a string constant "<nil>", so its Go type stays a
// plain string (x-go-type, which other generators ignore).
func nullable(s map[string]any) map[string]any {
	out := map[string]any{"nullable": true}
	for k, v := range s {
		out[k] = v
	}
	if vals, isEnum := s["enum"].([]string); isEnum {
		list := make([]any, 0, len(vals)+1)
		for _, v := range vals {
			list = append(list, v)
		}
		out["enum"] = append(list, nil)
		out["x-go-type"] = "string"
	}
	return out
}

// anyJSON is any JSON value, null included, as OpenAPI 3.0 can say it.
func anyJSON() map[string]any {
	return map[string]any{"description": "any JSON value", "anyOf": []any{
		map[string]any{"type": "object", "nullable": true, "additionalProperties": true},
		map[string]any{"type": "array", "items": map[string]any{}},
		map[string]any{"type": "string"}, map[string]any{"type": "number"}, map[string]any{"type": "boolean"},
	}}
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Document is the OpenAPI document as JSON, without a server: for
// `task-service openapi`, client generators and the lint.
func Document() ([]byte, error) {
	s := &Server{metrics: newMetrics(prometheus.NewRegistry())}
	s.routes = s.table()
	return json.MarshalIndent(s.OpenAPI(), "", "  ")
}
