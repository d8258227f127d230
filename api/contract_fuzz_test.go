package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/client"
)

// The contract fuzz: requests drawn from the served document's schemas, for
// every operation, sent as an admin and as a worker to a real server on a
// scratch database. The document's own validator (kin-openapi) says whether
// a drawn request is valid; the server must agree:
//   - a valid request is never refused for its shape (400);
//   - an invalid one gets a 4xx;
//   - every answer is one the document allows;
//   - never a 5xx.
//
// make test runs a few requests per operation with a fixed seed;
// make fuzz-contract runs many more (CONTRACT_FUZZ_CHECKS, CONTRACT_FUZZ_SEED).

// fuzzEnvInt reads a positive number from the environment.
func fuzzEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

func TestContractFuzz(t *testing.T) {
	t.Parallel()
	checks := fuzzEnvInt(t, "CONTRACT_FUZZ_CHECKS", 4)
	seed := fuzzEnvInt(t, "CONTRACT_FUZZ_SEED", 1)
	// rapid reads its settings from flags; no other test of the package uses it.
	require.NoError(t, flag.Set("rapid.checks", strconv.Itoa(checks)))
	require.NoError(t, flag.Set("rapid.seed", strconv.Itoa(seed)))
	require.NoError(t, flag.Set("rapid.nofailfile", "true"))

	b := setupHub(t)
	b.run(t) // the event stream
	f := newContractFuzzer(t, b)
	start := time.Now()
	for _, op := range f.ops {
		for _, role := range []string{"admin", "worker"} {
			rapid.Check(t, func(rt *rapid.T) { f.one(rt, op, role) })
		}
	}
	t.Logf("contract fuzz: %d operations, %d requests (%d valid, %d invalid) in %s, seed %d, %d checks per operation and role",
		len(f.ops), f.valid+f.invalid, f.valid, f.invalid, time.Since(start).Round(time.Millisecond), seed, checks)
	classes := f.summary()
	for _, c := range classes {
		t.Logf("failure class: %s [%d times]\n\te.g. %s", c, f.counts[c], f.classes[c])
	}
	t.Logf("contract fuzz: %d failure classes", len(classes))
	require.Empty(t, classes, "failure classes")
}

// fuzzOp is one operation of the document.
type fuzzOp struct {
	method, path string
	op           *openapi3.Operation
}

type contractFuzzer struct {
	t        *testing.T
	b        *bundle
	ops      []fuzzOp
	router   routers.Router
	answers  *apitest.Contract // every answer checked against the document
	tokens   map[string]string
	ids      []string // ids that name something: a type, a task, a worker
	options  *openapi3filter.Options
	mu       sync.Mutex
	classes  map[string]string // failure class -> its first request and answer
	counts   map[string]int
	valid    int
	invalid  int
	patterns map[string]*regexp.Regexp
}

func newContractFuzzer(t *testing.T, b *bundle) *contractFuzzer {
	raw, err := json.Marshal(b.srv.OpenAPI())
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	answers, err := apitest.Load(raw)
	require.NoError(t, err)

	// What the fuzz's ids name: a task type that takes any params (a type's
	// own param schema is data the document cannot know), a task the worker
	// holds, and another worker (never the fuzz's own accounts, whose tokens
	// a valid request could revoke).
	w := b.newWorker(t, "Fuzz", 5)
	other := b.newWorker(t, "Other", 1)
	tt, err := b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: "fuzz_type", Label: "Fuzz", SOP: "Any params",
		ParamSchema: json.RawMessage(`{"type":"object"}`)})
	require.NoError(t, err)
	task, err := b.admin.CreateTask(b.ctx, client.NewTask{Title: "Fuzzed", TaskTypeID: tt.ID, Priority: "medium",
		Params: json.RawMessage(`{}`), AssignedTo: w.ID})
	require.NoError(t, err)
	_, err = w.Claim(b.ctx)
	require.NoError(t, err)

	f := &contractFuzzer{t: t, b: b, router: router, answers: answers,
		tokens:   map[string]string{"admin": b.admin.Token(), "worker": w.Token()},
		ids:      []string{tt.ID, task.ID, other.ID},
		classes:  map[string]string{},
		counts:   map[string]int{},
		patterns: map[string]*regexp.Regexp{},
		options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.WithStringFormatValidators(map[string]openapi3.StringFormatValidator{
				"uuid":  openapi3.NewRegexpFormatValidator(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`),
				"email": openapi3.NewCallbackValidator(isEmailAddress),
				// The document's own formats (ADR 029), as its descriptions say.
				"go-duration":         openapi3.NewCallbackValidator(func(s string) error { _, err := time.ParseDuration(s); return err }),
				"days-or-go-duration": openapi3.NewCallbackValidator(func(s string) error { _, err := parseDaysOrDuration(s); return err }),
				"time-zone":           openapi3.NewCallbackValidator(isTimeZone),
				"cron":                openapi3.NewCallbackValidator(isCron),
				"regex":               openapi3.NewCallbackValidator(func(s string) error { _, err := regexp.Compile(s); return err }),
			})}},
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			f.ops = append(f.ops, fuzzOp{method: method, path: path, op: op})
		}
	}
	// A password change ends every token of its user: last.
	sort.Slice(f.ops, func(i, j int) bool {
		pi, pj := strings.HasSuffix(f.ops[i].path, "/auth/password"), strings.HasSuffix(f.ops[j].path, "/auth/password")
		if pi != pj {
			return pj
		}
		return f.ops[i].op.OperationID < f.ops[j].op.OperationID
	})
	return f
}

// isEmailAddress is what format email means: an RFC 5322 address alone.
func isEmailAddress(s string) error {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s {
		return fmt.Errorf("not an email address")
	}
	return nil
}

// drawn is a request drawn for an operation, and what was broken in it
// ("" for none).
type drawn struct {
	method, path string
	query        url.Values
	body         []byte
	contentType  string
	broke        string
}

// one draws a request for op, sends it as role and checks the answer.
func (f *contractFuzzer) one(rt *rapid.T, op fuzzOp, role string) {
	d := f.draw(rt, op)
	valid, why := f.validate(d)
	req := f.request(d, role)
	status, header, body := f.send(req)

	f.mu.Lock()
	if valid {
		f.valid++
	} else {
		f.invalid++
	}
	f.mu.Unlock()
	desc := func() string {
		return fmt.Sprintf("%s %s (body %.300s) as %s -> %d %.300s", d.method, req.URL.RequestURI(), d.body, role, status, body)
	}
	id := op.op.OperationID
	switch {
	case status >= 500:
		f.fail(fmt.Sprintf("%s: %d", id, status), desc())
	case valid && status == http.StatusBadRequest && !onlyHandedOut[errorOf(body).Field]:
		f.fail(fmt.Sprintf("%s: a valid request refused, field %q (%s)", id, errorOf(body).Field, errorOf(body).Code), desc())
	case !valid && status < 400 && !refusesAnItem(body):
		f.fail(fmt.Sprintf("%s: an invalid request accepted (%s)", id, d.broke), desc()+"; the document says: "+why)
	}
	before := len(f.answers.Failures())
	checked := req.Clone(context.Background())
	checked.Body = io.NopCloser(bytes.NewReader(d.body))
	f.answers.Check(checked, status, header, body)
	if after := f.answers.Failures(); len(after) > before {
		f.fail(fmt.Sprintf("%s: an answer outside the document (%d)", id, status), after[len(after)-1])
	}
}

func (f *contractFuzzer) fail(class, example string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, seen := f.classes[class]; !seen {
		f.classes[class] = example
	}
	f.counts[class]++
}

func (f *contractFuzzer) summary() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.classes))
	for class := range f.classes {
		out = append(out, class)
	}
	sort.Strings(out)
	return out
}

// refusesAnItem says a batch answer (200, each item with its own status)
// refused an item.
func refusesAnItem(body []byte) bool {
	var answer struct {
		Data json.RawMessage `json:"data"`
	}
	var items []struct {
		Status int `json:"status"`
	}
	var page struct {
		Items []struct {
			Status int `json:"status"`
		} `json:"items"`
	}
	if json.Unmarshal(body, &answer) != nil {
		return false
	}
	if json.Unmarshal(answer.Data, &items) != nil {
		_ = json.Unmarshal(answer.Data, &page)
		items = page.Items
	}
	for _, it := range items {
		if it.Status >= 400 && it.Status < 500 {
			return true
		}
	}
	return false
}

type errorAnswer struct{ Code, Field, Message string }

func errorOf(body []byte) errorAnswer {
	var e struct{ Error errorAnswer }
	_ = json.Unmarshal(body, &e)
	return e.Error
}

// validate asks the document whether d is a request it allows.
func (f *contractFuzzer) validate(d drawn) (bool, string) {
	req := f.request(d, "")
	route, params, err := f.router.FindRoute(req)
	if err != nil {
		return false, err.Error()
	}
	err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route, Options: f.options})
	if err != nil {
		return false, err.Error()
	}
	if err := checkExtensions(route.Operation, d); err != nil {
		return false, err.Error()
	}
	return true, ""
}

func (f *contractFuzzer) request(d drawn, role string) *http.Request {
	u := f.b.url + d.path
	if len(d.query) > 0 {
		u += "?" + d.query.Encode()
	}
	var body io.Reader = http.NoBody
	if d.body != nil {
		body = bytes.NewReader(d.body)
	}
	req, err := http.NewRequestWithContext(f.b.ctx, d.method, u, body)
	require.NoError(f.t, err)
	if d.contentType != "" {
		req.Header.Set("Content-Type", d.contentType)
	}
	if tok := f.tokens[role]; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req
}

// send sends req and reads its answer; a stream is read no further than its
// headers.
func (f *contractFuzzer) send(req *http.Request) (int, http.Header, []byte) {
	ctx, cancel := context.WithTimeout(req.Context(), 20*time.Second)
	defer cancel()
	resp, err := f.b.http.Do(req.WithContext(ctx))
	require.NoError(f.t, err, "%s %s", req.Method, req.URL)
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, resp.Header, nil
	}
	body, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return resp.StatusCode, resp.Header, body
}

// draw makes a request for op: valid parts drawn from the schemas, and with
// about even odds one part broken.
func (f *contractFuzzer) draw(rt *rapid.T, op fuzzOp) drawn {
	d := drawn{method: op.method, query: url.Values{}}
	type site struct{ kind, name string }
	var sites []site
	var bodySchema *openapi3.Schema
	if rb := op.op.RequestBody; rb != nil {
		if mt := rb.Value.Content.Get("application/json"); mt != nil {
			bodySchema = mt.Schema.Value
			sites = append(sites, site{"body", ""})
		}
	}
	for _, p := range op.op.Parameters {
		if p.Value.In == "path" || p.Value.In == "query" {
			sites = append(sites, site{p.Value.In, p.Value.Name})
		}
	}
	breakAt := site{kind: "none"}
	if len(sites) > 0 && rapid.Bool().Draw(rt, "break") {
		breakAt = rapid.SampledFrom(sites).Draw(rt, "where")
	}

	path := op.path
	for _, p := range op.op.Parameters {
		pv := p.Value
		switch pv.In {
		case "path":
			v := rapid.SampledFrom(append([]string{randomUUID(rt)}, f.ids...)).Draw(rt, "id")
			if breakAt == (site{"path", pv.Name}) {
				v = rapid.SampledFrom([]string{"not-a-uuid", "12345", strings.Repeat("a", 36)}).Draw(rt, "bad id")
				d.broke = "path " + pv.Name + " not a uuid"
			}
			path = strings.ReplaceAll(path, "{"+pv.Name+"}", url.PathEscape(v))
		case "query":
			s, asJSON := paramSchema(pv)
			text := queryText
			if asJSON {
				text = func(v any) string { raw, _ := json.Marshal(v); return string(raw) }
			}
			if breakAt == (site{"query", pv.Name}) {
				v, how := f.broken(rt, pv.Name, s, !asJSON)
				d.broke = "query " + pv.Name + ": " + how
				d.query.Set(pv.Name, text(v))
				continue
			}
			if !pv.Required && (onlyHandedOut[pv.Name] || !rapid.Bool().Draw(rt, "with "+pv.Name)) {
				continue
			}
			if asJSON {
				d.query.Set(pv.Name, text(f.value(rt, pv.Name, s, 0)))
				continue
			}
			if s.Type.Is("array") {
				for _, item := range f.value(rt, pv.Name, s, 0).([]any) {
					d.query.Add(pv.Name, queryText(item))
				}
				continue
			}
			d.query.Set(pv.Name, queryText(f.value(rt, pv.Name, s, 0)))
		}
	}
	d.path = path

	switch {
	case bodySchema != nil:
		d.contentType = "application/json"
		required := op.op.RequestBody.Value.Required
		if !required && breakAt.kind != "body" && !rapid.Bool().Draw(rt, "with a body") {
			break
		}
		v := f.value(rt, "", bodySchema, 0)
		if breakAt.kind == "body" {
			v, d.broke = f.breakValue(rt, v, bodySchema)
		}
		raw, err := json.Marshal(v)
		require.NoError(f.t, err)
		d.body = raw
	case op.op.RequestBody != nil: // an upload: raw bytes
		d.contentType = "application/octet-stream"
		d.body = []byte(rapid.StringN(1, 64, -1).Draw(rt, "bytes"))
	}
	return d
}

func queryText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	}
	raw, _ := json.Marshal(v)
	return string(raw)
}

func randomUUID(rt *rapid.T) string {
	return rapid.StringMatching(`[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`).Draw(rt, "uuid")
}

// onlyHandedOut are optional values a client cannot make up, only pass on:
// a list's cursor. A made-up one is refused (400), as an id that names
// nothing is (404); valid requests leave them out.
var onlyHandedOut = map[string]bool{"after": true}

// fuzzRunes are what drawn strings are made of: ASCII most, a space, and
// characters of two and three bytes in UTF-8.
var fuzzRunes = []rune("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 _-.:/éß日")

// value draws a value that schema s allows, for a field named name.
func (f *contractFuzzer) value(rt *rapid.T, name string, s *openapi3.Schema, depth int) any {
	if s.Nullable && rapid.IntRange(0, 9).Draw(rt, name+" null?") == 0 {
		return nil
	}
	alts := append(append([]*openapi3.SchemaRef{}, s.AnyOf...), s.OneOf...)
	if len(alts) > 0 {
		return f.value(rt, name, rapid.SampledFrom(alts).Draw(rt, name+" alt").Value, depth)
	}
	if len(s.Enum) > 0 {
		return rapid.SampledFrom(s.Enum).Draw(rt, name)
	}
	switch {
	case s.Type.Is("object"):
		out := map[string]any{}
		keys := keysOf(s.Properties)
		for _, k := range keys {
			if !isIn(s.Required, k) && (depth > 3 || onlyHandedOut[k] || !rapid.Bool().Draw(rt, "with "+k)) {
				continue
			}
			out[k] = f.value(rt, k, s.Properties[k].Value, depth+1)
		}
		if len(keys) == 0 && s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has || len(keys) == 0 && s.AdditionalProperties.Schema == nil {
			if rapid.Bool().Draw(rt, name+" free") {
				out["k"] = rapid.SampledFrom([]any{"v", 1.0, true, []any{"x"}}).Draw(rt, name+" free value")
			}
		}
		return out
	case s.Type.Is("array"):
		lo, hi := int(s.MinItems), 4
		if s.MaxItems != nil && int(*s.MaxItems) < hi {
			hi = int(*s.MaxItems)
		}
		if hi < lo {
			hi = lo
		}
		n := rapid.IntRange(lo, hi).Draw(rt, name+" items")
		out := make([]any, n)
		for i := range out {
			out[i] = f.value(rt, strings.TrimSuffix(name, "s"), s.Items.Value, depth+1)
		}
		return out
	case s.Type.Is("integer"):
		lo, hi := -1000, 1<<31
		if s.Min != nil {
			lo = int(*s.Min)
		}
		if s.Max != nil {
			hi = int(*s.Max)
		}
		if name == "wait" {
			return 0.0 // in range, but a longer one only costs time
		}
		return float64(rapid.IntRange(lo, hi).Draw(rt, name))
	case s.Type.Is("number"):
		lo, hi := -1e6, 1e6
		if s.Min != nil {
			lo = *s.Min
		}
		if s.Max != nil {
			hi = *s.Max
		}
		return rapid.Float64Range(lo, hi).Draw(rt, name)
	case s.Type.Is("boolean"):
		return rapid.Bool().Draw(rt, name)
	case s.Type.Is("string"):
		return f.text(rt, name, s)
	}
	return map[string]any{}
}

func (f *contractFuzzer) text(rt *rapid.T, name string, s *openapi3.Schema) string {
	switch s.Format {
	case "uuid":
		return rapid.SampledFrom(append([]string{randomUUID(rt)}, f.ids...)).Draw(rt, name)
	case "date-time":
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rapid.IntRange(0, 3*365*24).Draw(rt, name)) * time.Hour)
		return at.Format(time.RFC3339)
	case "email":
		return rapid.StringMatching(`[a-z][a-z0-9]{0,10}@[a-z]{1,10}\.(com|org|de)`).Draw(rt, name)
	case "go-duration", "days-or-go-duration":
		var fits []string
		for _, c := range []string{"1s", "30s", "1m", "90m", "1h30m", "6h", "24h", "12h", "30d", "7d"} {
			if _, err := parseDaysOrDuration(c); err == nil && (s.Format == "days-or-go-duration" || !strings.HasSuffix(c, "d")) &&
				durationBounds(s, c) == nil && (s.Pattern == "" || f.pattern(s.Pattern).MatchString(c)) {
				fits = append(fits, c)
			}
		}
		return rapid.SampledFrom(fits).Draw(rt, name)
	case "time-zone":
		return rapid.SampledFrom([]string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"}).Draw(rt, name)
	case "cron":
		return rapid.SampledFrom([]string{"0 9 * * 1-5", "*/15 * * * *", "@daily", "@hourly", "0 0 1 * *"}).Draw(rt, name)
	case "regex":
		return rapid.SampledFrom([]string{"^HTTP 404", "timeout", "(a|b)+"}).Draw(rt, name)
	}
	lo, hi := int(s.MinLength), int(s.MinLength)+24
	if s.MaxLength != nil && int(*s.MaxLength) < hi {
		hi = int(*s.MaxLength)
	}
	if s.MaxLength != nil && rapid.IntRange(0, 5).Draw(rt, name+" longest?") == 0 {
		lo = int(*s.MaxLength) // the longest the document allows
		hi = lo
	}
	plain := rapid.StringOfN(rapid.RuneFrom(fuzzRunes), lo, hi, -1).Draw(rt, name)
	if s.Pattern == "" {
		return plain
	}
	re := f.pattern(s.Pattern)
	if re.MatchString(plain) {
		return plain
	}
	matching := rapid.StringMatching(s.Pattern).Draw(rt, name+" matching")
	if n := len([]rune(matching)); n >= int(s.MinLength) && (s.MaxLength == nil || n <= int(*s.MaxLength)) {
		return matching
	}
	return plain
}

func (f *contractFuzzer) pattern(p string) *regexp.Regexp {
	f.mu.Lock()
	defer f.mu.Unlock()
	re, found := f.patterns[p]
	if !found {
		re = regexp.MustCompile(p)
		f.patterns[p] = re
	}
	return re
}

// breakValue breaks v, a value of schema s, in one place: a field dropped
// or added, a wrong type, a length, number or item count out of bounds, a
// value outside an enum or a format. It names what it did.
func (f *contractFuzzer) breakValue(rt *rapid.T, v any, s *openapi3.Schema) (any, string) {
	type spot struct {
		at     string
		schema *openapi3.Schema
		set    func(any)
		value  any
	}
	var spots []spot
	var walk func(at string, v any, s *openapi3.Schema, set func(any))
	walk = func(at string, v any, s *openapi3.Schema, set func(any)) {
		if alts := append(append([]*openapi3.SchemaRef{}, s.AnyOf...), s.OneOf...); len(alts) == 1 {
			s = alts[0].Value // a nullable reference: its one schema
		}
		spots = append(spots, spot{at, s, set, v})
		switch x := v.(type) {
		case map[string]any:
			for _, k := range keysOf(x) {
				if p := s.Properties[k]; p != nil {
					walk(at+"."+k, x[k], p.Value, func(nv any) { x[k] = nv })
				}
			}
		case []any:
			if s.Items != nil {
				for i := range x {
					walk(fmt.Sprintf("%s[%d]", at, i), x[i], s.Items.Value, func(nv any) { x[i] = nv })
				}
			}
		}
	}
	out := v
	walk("body", v, s, func(nv any) { out = nv })
	sp := rapid.SampledFrom(spots).Draw(rt, "spot")
	nv, how := f.broken(rt, sp.at, sp.schema, false)
	if obj, isObj := sp.value.(map[string]any); isObj {
		switch rapid.IntRange(0, 2).Draw(rt, "object break") {
		case 0:
			if len(sp.schema.Required) > 0 {
				k := rapid.SampledFrom(sp.schema.Required).Draw(rt, "drop")
				delete(obj, k)
				return out, sp.at + "." + k + " missing"
			}
		case 1:
			obj["not_a_field"] = "x"
			return out, sp.at + " has an unknown field"
		}
	}
	sp.set(nv)
	return out, sp.at + ": " + how
}

// broken draws a value schema s does not allow, and says how.
func (f *contractFuzzer) broken(rt *rapid.T, name string, s *openapi3.Schema, inQuery bool) (any, string) {
	var ways []string
	switch {
	case s.Type.Is("string"):
		if !inQuery {
			ways = append(ways, "a number") // a query's values are all text
		}
		if s.MinLength > 0 {
			ways = append(ways, "too short")
		}
		if s.MaxLength != nil {
			ways = append(ways, "too long")
		}
		if len(s.Enum) > 0 {
			ways = append(ways, "not in the enum")
		}
		if s.Format != "" {
			ways = append(ways, "a bad "+s.Format)
		}
		if s.Pattern != "" {
			ways = append(ways, "not matching "+s.Pattern)
		}
	case s.Type.Is("integer"), s.Type.Is("number"):
		ways = append(ways, "a string")
		if s.Type.Is("integer") {
			ways = append(ways, "a fraction")
		}
		if s.Min != nil {
			ways = append(ways, "below the minimum")
		}
		if s.Max != nil {
			ways = append(ways, "above the maximum")
		}
	case s.Type.Is("boolean"):
		ways = append(ways, "a string")
	case s.Type.Is("array"):
		ways = append(ways, "an object")
		if s.MinItems > 0 {
			ways = append(ways, "too few items")
		}
		if s.MaxItems != nil {
			ways = append(ways, "too many items")
		}
	case s.Type.Is("object"):
		ways = append(ways, "an array")
	default:
		ways = append(ways, "a string")
	}
	if !s.Nullable {
		ways = append(ways, "null")
	}
	how := rapid.SampledFrom(ways).Draw(rt, "how")
	switch how {
	case "a number":
		return 12345.0, how
	case "a string":
		return "not-a-value", how
	case "an array":
		return []any{1.0}, how
	case "an object":
		return map[string]any{"a": 1.0}, how
	case "null":
		return nil, how
	case "too short":
		return strings.Repeat("a", int(s.MinLength)-1), how
	case "too long":
		return strings.Repeat("a", int(*s.MaxLength)+1), how
	case "not in the enum":
		return "not-in-the-enum", how
	case "a fraction":
		return 1.5, how
	case "below the minimum":
		return *s.Min - 1, how
	case "above the maximum":
		return *s.Max + 1, how
	case "too few items":
		return []any{}, how
	case "too many items":
		items := make([]any, int(*s.MaxItems)+1)
		for i := range items {
			items[i] = f.value(rt, name, s.Items.Value, 4)
		}
		return items, how
	}
	if strings.HasPrefix(how, "a bad ") {
		if s.Format == "regex" {
			return "(unclosed", how
		}
		return "not-a-" + s.Format, how
	}
	return "!! ", how // not matching a pattern
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isIn(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
