package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// methodTable answers which methods a request path has, by the route it
// names most exactly. echo, given a path whose static route lacks the
// method, falls back to a parameter route that has it: PUT .../task-types
// reached PUT .../:id and came back as "id: must be a UUID". The table
// decides first, before authentication and before any parameter is read.
type methodTable []methodRoute

type methodRoute struct {
	segments []string // ":" for a parameter
	methods  []string
}

func newMethodTable(routes []route) methodTable {
	var t methodTable
	for _, r := range routes {
		segs := strings.Split(strings.Trim(r.path, "/"), "/")
		for i, s := range segs {
			if strings.HasPrefix(s, ":") {
				segs[i] = ":"
			}
		}
		i := slices.IndexFunc(t, func(m methodRoute) bool { return slices.Equal(m.segments, segs) })
		if i < 0 {
			t, i = append(t, methodRoute{segments: segs}), len(t)
		}
		if !slices.Contains(t[i].methods, r.method) {
			t[i].methods = append(t[i].methods, r.method)
		}
	}
	return t
}

// allowed is the methods of the route that names path most exactly (a
// static segment before a parameter, from the left, as echo matches), or
// nil when no route names it.
func (t methodTable) allowed(path string) []string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var best *methodRoute
	for i := range t {
		m := &t[i]
		if len(m.segments) != len(segs) || !m.names(segs) {
			continue
		}
		if best == nil || m.moreExact(best) {
			best = m
		}
	}
	if best == nil {
		return nil
	}
	return best.methods
}

func (m *methodRoute) names(segs []string) bool {
	for i, s := range m.segments {
		if s != ":" && s != segs[i] {
			return false
		}
	}
	return true
}

func (m *methodRoute) moreExact(o *methodRoute) bool {
	for i, s := range m.segments {
		if (s == ":") != (o.segments[i] == ":") {
			return s != ":"
		}
	}
	return false
}

// refuseWrongMethod answers 405 with Allow for a known path asked with a
// method it does not have. OPTIONS is left to CORS.
func (s *Server) refuseWrongMethod(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Method == http.MethodOptions {
			return next(c)
		}
		methods := s.methods.allowed(req.URL.Path)
		if methods == nil || slices.Contains(methods, req.Method) {
			return next(c)
		}
		c.Response().Header().Set(echo.HeaderAllow, strings.Join(methods, ", "))
		return echo.NewHTTPError(http.StatusMethodNotAllowed)
	}
}
