package api

import (
	"net/http"
	"reflect"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"
)

var pathParam = regexp.MustCompile(`:([a-z_]+)`)

// OpenAPI builds the document from the route table, so it cannot drift from
// what is registered (a test checks that against the router).
func (s *Server) OpenAPI() map[string]any {
	paths := map[string]map[string]any{}
	for _, r := range s.routes {
		p := pathParam.ReplaceAllString(r.path, "{$1}")
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		op := map[string]any{
			"operationId": r.id,
			"summary":     r.summary,
			"responses":   map[string]any{"200": map[string]any{"description": "success envelope"}, "default": map[string]any{"description": "error envelope", "content": jsonContent(ref("Error"))}},
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(r.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string", "format": "uuid"}})
		}
		for _, q := range r.query {
			params = append(params, map[string]any{"name": q, "in": "query", "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if r.request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": jsonContent(schemaOf(reflect.TypeOf(r.request)))}
		}
		if r.role != rolePublic {
			op["security"] = []any{map[string]any{"bearer": []string{}}}
			op["tags"] = []string{r.role}
		}
		paths[p][strings.ToLower(r.method)] = op
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"} {
		paths[p] = map[string]any{"get": map[string]any{"summary": "operations", "responses": map[string]any{"200": map[string]any{"description": "ok"}}}}
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "task-service", "version": "1"},
		"paths":   paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
			"schemas": map[string]any{"Error": map[string]any{"type": "object", "properties": map[string]any{
				"success": map[string]any{"type": "boolean"},
				"error": map[string]any{"type": "object", "properties": map[string]any{
					"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}, "field": map[string]any{"type": "string"}}},
			}}},
		},
	}
}

func (s *Server) openapi(c echo.Context) error { return c.JSON(http.StatusOK, s.OpenAPI()) }

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func jsonContent(schema any) map[string]any {
	return map[string]any{"application/json": map[string]any{"schema": schema}}
}

// schemaOf describes a request struct from its json tags.
func schemaOf(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // json.RawMessage: any JSON
			return map[string]any{}
		}
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			props[name] = schemaOf(f.Type)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
		out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if required != nil {
			out["required"] = required
		}
		return out
	}
	return map[string]any{}
}
