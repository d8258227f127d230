package api

import (
	"fmt"
	"math"
	"net/mail"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/clawdbot/task-service/events"
)

// The shape validator: a request's shape checked from the same openapi
// tags that write the document (ADR 029), compiled once per Go type by
// reflection into a tree of checks, and run on the decoded struct (no map
// decoding). It checks what a tag states: required, enums, lengths in
// characters, patterns, formats, bounds, item counts, unique items, a
// value against a sibling's. A scalar field left at its zero value and not
// a pointer counts as left out (encoding/json cannot tell them apart), so
// only its required rule applies, and only where the document refuses the
// zero value too (an empty string with a minLength, pattern, format or
// enum). Errors are today's: a 400 validation_failed naming the JSON path.
//
// What stays in the handlers and events: rules across fields
// (api/crossrules.go states them), a task's params against its type's
// schema, and whatever needs the database or state.

// shapeCheck checks v, found at JSON path at.
type shapeCheck func(v reflect.Value, at string) error

var shapeChecks sync.Map // reflect.Type -> shapeCheck

// validateShape checks v (a pointer to a request) against its tags.
func validateShape(v any) error {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return nil
	}
	if check := shapeCheckOf(rv.Type()); check != nil {
		return check(rv, "")
	}
	return nil
}

// shapeCheckOf is t's compiled check, nil when t has no rules.
func shapeCheckOf(t reflect.Type) shapeCheck {
	if c, found := shapeChecks.Load(t); found {
		return c.(shapeCheck)
	}
	var compiled shapeCheck
	// A type that contains itself reads its own entry, filled below.
	shapeChecks.Store(t, shapeCheck(func(v reflect.Value, at string) error {
		if compiled == nil {
			return nil
		}
		return compiled(v, at)
	}))
	compiled = compileShape(t)
	if compiled == nil {
		compiled = func(reflect.Value, string) error { return nil }
	}
	shapeChecks.Store(t, compiled)
	return compiled
}

func compileShape(t reflect.Type) shapeCheck {
	if t == timeType || t == rawType {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		elem := shapeCheckOf(t.Elem())
		return func(v reflect.Value, at string) error {
			if v.IsNil() {
				return nil
			}
			return elem(v.Elem(), at)
		}
	case reflect.Struct:
		return compileStruct(t)
	case reflect.Slice:
		return compileSlice(t, nil)
	case reflect.Map:
		elem := shapeCheckOf(t.Elem())
		return func(v reflect.Value, at string) error {
			iter := v.MapRange()
			for iter.Next() {
				if err := elem(iter.Value(), events.FieldPath(at, fmt.Sprint(iter.Key().Interface()))); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return nil
}

// shapeField is one field of a struct: where it is and its checks.
type shapeField struct {
	name  string
	index []int
	check shapeCheck
	// compare: greater or atLeast, against the sibling named other.
	compare, other string
}

func compileStruct(t reflect.Type) shapeCheck {
	var all []shapeField
	collectFields(t, nil, &all)
	// A field of the same name nearer the top (an outer one, listed after
	// the embedded struct) hides the other, as in encoding/json: keep the last.
	var fields []shapeField
	for i, f := range all {
		hidden := false
		for _, later := range all[i+1:] {
			hidden = hidden || later.name == f.name
		}
		if !hidden {
			fields = append(fields, f)
		}
	}
	others := map[string][]int{} // the siblings compared with, by name
	for _, f := range fields {
		if f.compare != "" {
			sib := siblingIndex(t, f.index, f.other)
			if sib == nil {
				panic(fmt.Sprintf("api: %s compares %s with %s, which it lacks", t, f.name, f.other))
			}
			others[f.other] = sib
		}
	}
	return func(v reflect.Value, at string) error {
		for _, f := range fields {
			fv := v.FieldByIndex(f.index)
			path := events.FieldPath(at, f.name)
			if err := f.check(fv, path); err != nil {
				return err
			}
			if f.compare != "" {
				if err := compareSiblings(fv, v.FieldByIndex(others[f.other]), f.compare, f.other, path); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// siblingIndex is the index of the field named name in the struct that
// holds the field at index (t itself, or a struct embedded in it); nil
// when there is none.
func siblingIndex(t reflect.Type, index []int, name string) []int {
	holder := t
	for _, i := range index[:len(index)-1] {
		holder = holder.Field(i).Type
	}
	sib, found := jsonField(holder, name)
	if !found || len(sib.Index) != 1 {
		return nil
	}
	return append(slices.Clone(index[:len(index)-1]), sib.Index[0])
}

func collectFields(t reflect.Type, index []int, out *[]shapeField) {
	for i := range t.NumField() {
		f := t.Field(i)
		at := append(append([]int{}, index...), i)
		name, embedded := jsonName(f)
		if embedded {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				continue // never in a request; FieldByIndex would need it set
			}
			collectFields(ft, at, out)
			continue
		}
		if name == "" {
			continue
		}
		rules := parseRules(f.Tag.Get("openapi"))
		check := compileField(f.Type, rules)
		if check == nil && rules["greater"] == "" && rules["atLeast"] == "" {
			continue
		}
		if check == nil {
			check = func(reflect.Value, string) error { return nil }
		}
		sf := shapeField{name: name, index: at, check: check}
		if o := rules["greater"]; o != "" {
			sf.compare, sf.other = "greater", o
		} else if o := rules["atLeast"]; o != "" {
			sf.compare, sf.other = "atLeast", o
		}
		*out = append(*out, sf)
	}
}

// compileField is a field's checks: its own rules, then its type's.
func compileField(t reflect.Type, rules map[string]string) shapeCheck {
	pointer := t.Kind() == reflect.Pointer
	base := t
	if pointer {
		base = t.Elem()
	}
	var checks []func(v reflect.Value, at string) error
	switch {
	case base == rawType || base == timeType:
	case base.Kind() == reflect.String:
		checks = stringChecks(rules)
	case base.Kind() == reflect.Int || base.Kind() == reflect.Int64 || base.Kind() == reflect.Int32 ||
		base.Kind() == reflect.Float64 || base.Kind() == reflect.Float32:
		checks = numberChecks(rules)
	case base.Kind() == reflect.Slice:
		if c := compileSlice(base, rules); c != nil {
			checks = append(checks, c)
		}
	}
	var inner shapeCheck
	if base.Kind() == reflect.Struct && base != timeType || base.Kind() == reflect.Map {
		inner = shapeCheckOf(base)
	}
	required := rules["required"] != ""
	// A string's zero value is "left out" only where the document refuses "".
	zeroRefused := base.Kind() == reflect.String && (rules["minLength"] != "" && rules["minLength"] != "0" ||
		rules["nonblank"] != "" || rules["format"] != "" || rules["enum"] != "" || rules["pattern"] != "")
	if len(checks) == 0 && inner == nil && !required {
		return nil
	}
	return func(v reflect.Value, at string) error {
		if pointer {
			if v.IsNil() {
				if required {
					return events.Invalid(at, "is required")
				}
				return nil
			}
			v = v.Elem()
		} else if v.IsZero() {
			switch {
			case !required:
				return nil
			case v.Kind() == reflect.Slice || v.Kind() == reflect.Map || v.Kind() == reflect.Pointer || zeroRefused:
				return events.Invalid(at, "is required")
			case v.Kind() != reflect.Struct:
				return nil // a number or boolean left at zero: its handler's default
			}
		}
		for _, c := range checks {
			if err := c(v, at); err != nil {
				return err
			}
		}
		if inner != nil {
			return inner(v, at)
		}
		return nil
	}
}

func stringChecks(rules map[string]string) []func(v reflect.Value, at string) error {
	var out []func(v reflect.Value, at string) error
	if vals := rules["enum"]; vals != "" {
		allowed := map[string]bool{}
		for _, s := range strings.Split(vals, "|") {
			allowed[s] = true
		}
		list := strings.ReplaceAll(vals, "|", ", ")
		out = append(out, func(v reflect.Value, at string) error {
			if !allowed[v.String()] {
				return events.Invalid(at, "must be one of %s", list)
			}
			return nil
		})
	}
	lo, hi := intRule(rules, "minLength", -1), intRule(rules, "maxLength", -1)
	if lo > 0 || hi >= 0 {
		out = append(out, func(v reflect.Value, at string) error {
			n := utf8.RuneCountInString(v.String())
			if hi >= 0 && n > hi {
				return events.Invalid(at, "is longer than %d characters", hi)
			}
			if n < lo {
				if lo == 1 {
					return events.Invalid(at, "is required")
				}
				return events.Invalid(at, "is shorter than %d characters", lo)
			}
			return nil
		})
	}
	if rules["nonblank"] != "" {
		out = append(out, func(v reflect.Value, at string) error {
			if strings.TrimSpace(v.String()) == "" {
				return events.Invalid(at, "is required: not only white space")
			}
			return nil
		})
	}
	if rules["nonblankOrEmpty"] != "" {
		out = append(out, func(v reflect.Value, at string) error {
			if s := v.String(); s != "" && strings.TrimSpace(s) == "" {
				return events.Invalid(at, "is blank; leave it out or give a value")
			}
			return nil
		})
	}
	if p := rules["pattern"]; p != "" {
		re := regexp.MustCompile(p)
		out = append(out, func(v reflect.Value, at string) error {
			if !re.MatchString(v.String()) {
				return events.Invalid(at, "must match %s", p)
			}
			return nil
		})
	}
	format := rules["format"]
	if rules["duration"] != "" && format == "" {
		format = "go-duration"
	}
	if f := formatCheck(format); f != nil {
		out = append(out, func(v reflect.Value, at string) error { return f(v.String(), at) })
	}
	if d := rules["duration"]; d != "" {
		lo, hi, _ := strings.Cut(d, "..")
		var min, max time.Duration
		if lo != "" && lo != "$freshnessMinAge" { // the setting: the store checks it
			min, _ = time.ParseDuration(lo)
		}
		if hi != "" {
			max, _ = time.ParseDuration(hi)
		}
		whole := rules["wholeSeconds"] != ""
		out = append(out, func(v reflect.Value, at string) error {
			got, err := time.ParseDuration(v.String())
			if err != nil {
				return nil // the format's to say
			}
			switch {
			case got < min:
				return events.Invalid(at, "must be at least %s", shortDuration(min))
			case hi != "" && got > max:
				return events.Invalid(at, "must be at most %s", hi)
			case whole && got%time.Second != 0:
				return events.Invalid(at, "must be whole seconds")
			}
			return nil
		})
	}
	return out
}

// formatCheck checks a string format the document names.
func formatCheck(format string) func(s, at string) error {
	switch format {
	case "uuid":
		return func(s, at string) error { _, err := parseUUID(at, s); return err }
	case "date-time":
		return func(s, at string) error { _, err := events.ParseTimestamp(at, s); return err }
	case "email":
		return func(s, at string) error {
			if a, err := mail.ParseAddress(s); err != nil || a.Address != s {
				return events.Invalid(at, "is not an email address")
			}
			return nil
		}
	case "go-duration":
		return func(s, at string) error {
			if _, err := time.ParseDuration(s); err != nil {
				return events.Invalid(at, "is not a duration such as 6h, 90m or 30s")
			}
			return nil
		}
	case "time-zone":
		return func(s, at string) error {
			if _, err := (events.ScheduleTiming{TimeZone: s}).Location(); err != nil {
				return events.Invalid(at, "unknown time zone %q (use an IANA name such as Europe/Berlin)", s)
			}
			return nil
		}
	case "cron":
		return func(s, at string) error {
			if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
				return events.Invalid(at, "set the zone in time_zone, not in the expression")
			}
			if _, err := cron.ParseStandard(s); err != nil {
				return events.Invalid(at, "is not a cron expression (minute hour day-of-month month day-of-week, or @daily...): %v", err)
			}
			return nil
		}
	}
	return nil
}

func numberChecks(rules map[string]string) []func(v reflect.Value, at string) error {
	lo, hasLo := floatRule(rules, "min")
	hi, hasHi := floatRule(rules, "max")
	exclusive := rules["exclusiveMin"] != ""
	if !hasLo && !hasHi {
		return nil
	}
	return []func(v reflect.Value, at string) error{func(v reflect.Value, at string) error {
		var n float64
		if v.CanInt() {
			n = float64(v.Int())
		} else {
			n = v.Float()
		}
		if math.IsNaN(n) || hasLo && (n < lo || exclusive && n == lo) || hasHi && n > hi {
			switch {
			case exclusive && hasHi:
				return events.Invalid(at, "must be above %g and at most %g", lo, hi)
			case hasLo && hasHi:
				return events.Invalid(at, "must be from %g to %g", lo, hi)
			case hasLo:
				return events.Invalid(at, "must be at least %g", lo)
			}
			return events.Invalid(at, "must be at most %g", hi)
		}
		return nil
	}}
}

// compileSlice checks a list: its item count, unique items, items' format,
// and each item's own checks.
func compileSlice(t reflect.Type, rules map[string]string) shapeCheck {
	lo, hi := intRule(rules, "minItems", -1), intRule(rules, "maxItems", -1)
	if b, bounded := reflect.Zero(t).Interface().(itemBounds); bounded {
		lo, hi = b.itemBounds()
	}
	unique := rules["uniqueItems"] != ""
	var uniqueBy string
	if u, keyed := reflect.Zero(t).Interface().(interface{ uniqueBy() string }); keyed {
		uniqueBy = u.uniqueBy()
	}
	itemFormat := formatCheck(rules["itemFormat"])
	item := shapeCheckOf(t.Elem())
	return func(v reflect.Value, at string) error {
		n := v.Len()
		if hi >= 0 && n > hi || lo >= 0 && n < lo {
			return events.Invalid(at, "has %d items; send %d to %d", n, max(lo, 0), hi)
		}
		var seen map[any]int
		if unique || uniqueBy != "" {
			seen = make(map[any]int, n)
		}
		for i := range n {
			iv := v.Index(i)
			ipath := fmt.Sprintf("%s[%d]", at, i)
			if itemFormat != nil && iv.Kind() == reflect.String {
				if err := itemFormat(iv.String(), ipath); err != nil {
					return err
				}
			}
			if err := item(iv, ipath); err != nil {
				return err
			}
			if seen != nil {
				key, field := iv.Interface(), ipath
				if uniqueBy != "" {
					key, field = memberOf(iv, uniqueBy), events.FieldPath(ipath, uniqueBy)
				}
				if key == nil {
					continue
				}
				if j, dup := seen[key]; dup {
					return events.Invalid(field, "item %d repeats item %d (%v)", i, j, key)
				}
				seen[key] = i
			}
		}
		return nil
	}
}

// memberOf is the value of struct v's member named name, nil when unset.
func memberOf(v reflect.Value, name string) any {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	f, found := jsonField(v.Type(), name)
	if !found {
		return nil
	}
	m := v.FieldByIndex(f.Index)
	for m.Kind() == reflect.Pointer {
		if m.IsNil() {
			return nil
		}
		m = m.Elem()
	}
	return m.Interface()
}

// compareSiblings applies greater (a later time, a larger number) or
// atLeast to a field and the sibling it names; either left out passes.
func compareSiblings(a, b reflect.Value, how, other, at string) error {
	av, aOK := comparableValue(a)
	bv, bOK := comparableValue(b)
	if !aOK || !bOK {
		return nil
	}
	switch {
	case how == "greater" && !(av > bv):
		return events.Invalid(at, "must be after %s", other)
	case how == "atLeast" && av < bv:
		return events.Invalid(at, "must be at least %s", other)
	}
	return nil
}

func comparableValue(v reflect.Value) (float64, bool) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == timeType:
		return float64(v.Interface().(time.Time).UnixMicro()), true
	case v.CanFloat():
		return v.Float(), true
	case v.CanInt():
		return float64(v.Int()), true
	}
	return 0, false
}

func intRule(rules map[string]string, name string, def int) int {
	f, has := floatRule(rules, name)
	if !has {
		return def
	}
	return int(f)
}

func floatRule(rules map[string]string, name string) (float64, bool) {
	v, has := rules[name]
	if !has {
		return 0, false
	}
	var f float64
	if _, err := fmt.Sscan(v, &f); err != nil {
		panic(fmt.Sprintf("api: openapi tag %s=%s is not a number", name, v))
	}
	return f, true
}

// queryCheck checks one value of a query parameter.
type queryCheck func(value string) error

// compileQuery compiles the checks of a route's query parameters from the
// schemas the document states (param): an integer's range, a boolean, an
// enum, a format, a pattern, a length. A parameter whose value is JSON
// (the what-if policy) or a duration is its handler's to parse.
func compileQuery(params []param) map[string]queryCheck {
	out := map[string]queryCheck{}
	for _, p := range params {
		if c := compileQueryParam(p.name, p.schema, p.asJSON); c != nil {
			out[p.name] = c
		}
	}
	return out
}

func compileQueryParam(name string, s map[string]any, asJSON bool) queryCheck {
	if asJSON || s["format"] == "days-or-go-duration" {
		return nil
	}
	if s["type"] == "array" {
		items, isMap := s["items"].(map[string]any)
		if !isMap {
			return nil
		}
		item := compileQueryParam(name, items, false)
		if item == nil {
			return nil
		}
		return func(v string) error { // repeated, or a comma-separated list
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part != "" {
					if err := item(part); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	switch s["type"] {
	case "integer":
		lo, hi := queryBound(s["minimum"]), queryBound(s["maximum"])
		return func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || lo != nil && n < *lo || hi != nil && n > *hi {
				return events.Invalid(name, "must be a whole number from %d to %d", deref(lo, math.MinInt), deref(hi, math.MaxInt))
			}
			return nil
		}
	case "boolean":
		return func(v string) error {
			switch v {
			case "true", "false", "1", "0":
				return nil
			}
			return events.Invalid(name, "must be true or false")
		}
	}
	var checks []queryCheck
	if s["enum"] != nil {
		allowed := map[string]bool{}
		for _, v := range enumStrings(s["enum"]) {
			allowed[v] = true
		}
		checks = append(checks, func(v string) error {
			if !allowed[v] {
				return events.Invalid(name, "must be one of %s", strings.Join(enumStrings(s["enum"]), ", "))
			}
			return nil
		})
	}
	if n, has := s["maxLength"].(int); has {
		checks = append(checks, func(v string) error {
			if utf8.RuneCountInString(v) > n {
				return events.Invalid(name, "is longer than %d characters", n)
			}
			return nil
		})
	}
	if p, has := s["pattern"].(string); has {
		re := regexp.MustCompile(p)
		checks = append(checks, func(v string) error {
			if !re.MatchString(v) {
				return events.Invalid(name, "must match %s", p)
			}
			return nil
		})
	}
	if f, has := s["format"].(string); has {
		if fc := formatCheck(f); fc != nil {
			checks = append(checks, func(v string) error { return fc(v, name) })
		}
	}
	if len(checks) == 0 {
		return nil
	}
	return func(v string) error {
		for _, c := range checks {
			if err := c(v); err != nil {
				return err
			}
		}
		return nil
	}
}

func queryBound(v any) *int {
	if n, isInt := v.(int); isInt {
		return &n
	}
	return nil
}

func deref(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// enumStrings reads an enum of any string type ([]string, []T, []any).
func enumStrings(v any) []string {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return nil
	}
	out := make([]string, rv.Len())
	for i := range out {
		out[i] = fmt.Sprint(rv.Index(i).Interface())
	}
	return out
}
