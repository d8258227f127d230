package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// dbSnapshot is everything a rejected request must leave untouched.
type dbSnapshot struct {
	Events, MaxSeq                  int64
	Tasks, Users, Types, Creds      string
	Updates, Assignments, Heartbeat string
}

func (b *bundle) snapshot(t *testing.T) dbSnapshot {
	t.Helper()
	var s dbSnapshot
	err := b.pool.QueryRow(b.ctx, `SELECT
		(SELECT count(*) FROM task_events), (SELECT coalesce(max(seq), 0) FROM task_events),
		(SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t.id)), '') FROM worker_tasks t),
		(SELECT coalesce(md5(string_agg(u::text, '|' ORDER BY u.id)), '') FROM users u),
		(SELECT coalesce(md5(string_agg(x::text, '|' ORDER BY x.id)), '') FROM task_types x),
		(SELECT coalesce(md5(string_agg(c::text, '|' ORDER BY c.user_id)), '') FROM user_credentials c),
		(SELECT coalesce(md5(string_agg(w::text, '|' ORDER BY w.id)), '') FROM worker_task_updates w),
		(SELECT coalesce(md5(string_agg(a::text, '|' ORDER BY a.task_id, a.version)), '') FROM task_assignments a),
		(SELECT coalesce(md5(string_agg(u.last_activity_at::text, '|' ORDER BY u.id)), '') FROM users u)`).
		Scan(&s.Events, &s.MaxSeq, &s.Tasks, &s.Users, &s.Types, &s.Creds, &s.Updates, &s.Assignments, &s.Heartbeat)
	require.NoError(t, err)
	return s
}

// token signs claims shaped like api.Claims.
func token(t *testing.T, secret []byte, method jwt.SigningMethod, c api.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(secret)
	require.NoError(t, err)
	return s
}

func claimsFor(w *worker, issued, expires time.Time) api.Claims {
	return api.Claims{Email: w.Email, IsWorker: true, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "task-service", Subject: w.ID, IssuedAt: jwt.NewNumericDate(issued), ExpiresAt: jwt.NewNumericDate(expires)}}
}

// TestBadInput sends what clients get wrong. Every answer must be a 4xx with
// an error code (and the field at fault where there is one), and nothing in
// the database may change.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "report")
	w1 := b.newWorker(t, "Una", 2)
	w2 := b.newWorker(t, "Duo", 1)

	pending := b.newTask(t, tt, "pending", events.PriorityLow, "")
	held := b.newTask(t, tt, "held by Una", events.PriorityUrgent, "")
	got, err := w1.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, held.ID, got.ID)
	doneTask := b.newTask(t, tt, "done by Una", events.PriorityUrgent, "")
	got, err = w1.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, doneTask.ID, got.ID)
	_, err = w1.Complete(ctx, doneTask.ID)
	require.NoError(t, err)
	cancelled := b.newTask(t, tt, "cancelled", events.PriorityLow, "")
	_, err = b.admin.CancelTask(ctx, cancelled.ID, "not needed")
	require.NoError(t, err)
	forW2 := b.newTask(t, tt, "reserved for Duo", events.PriorityLow, w2.ID)
	_, err = b.admin.CreateTask(ctx, client.NewTask{Title: "keyed", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`), UniqueKey: "taken"})
	require.NoError(t, err)
	live, gone, oldType := b.badInputSchedules(t, tt)

	admin, una, duo := b.admin.Token(), w1.Token(), w2.Token()
	now := time.Now()
	expired := token(t, b.secret, jwt.SigningMethodHS256, claimsFor(w1, now.Add(-48*time.Hour), now.Add(-24*time.Hour)))
	forged := token(t, []byte("some-other-secret-0123456789abc"), jwt.SigningMethodHS256, claimsFor(w1, now, now.Add(time.Hour)))
	hs512 := token(t, b.secret, jwt.SigningMethodHS512, claimsFor(w1, now, now.Add(time.Hour)))
	noExpiry := func() string {
		c := claimsFor(w1, now, now)
		c.ExpiresAt = nil
		return token(t, b.secret, jwt.SigningMethodHS256, c)
	}()
	wrongIssuer := func() string {
		c := claimsFor(w1, now, now.Add(time.Hour))
		c.Issuer = "someone-else"
		return token(t, b.secret, jwt.SigningMethodHS256, c)
	}()
	noSubject := func() string {
		c := claimsFor(w1, now, now.Add(time.Hour))
		c.Subject = ""
		return token(t, b.secret, jwt.SigningMethodHS256, c)
	}()
	// A real token with the admin flag flipped in its payload: the signature
	// no longer matches.
	tampered := func() string {
		parts := strings.Split(una, ".")
		payload, err := jwtDecode(parts[1])
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(payload, &m))
		m["adm"] = true
		raw, _ := json.Marshal(m)
		parts[1] = jwtEncode(raw)
		return strings.Join(parts, ".")
	}()
	algNone := func() string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodNone, claimsFor(w1, now, now.Add(time.Hour))).SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		return s
	}()

	const (
		A = "/api/v1/admin/workers"
		W = "/api/v1/worker"
	)
	unknown := uuid.NewString()
	big := `{"title":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`
	task := func(fields string) string {
		return fmt.Sprintf(`{"title":"t","task_type_id":%q,%s}`, tt.ID, fields)
	}
	const S = "/api/v1/admin/schedules"
	schedOf := func(typeID, params, timing string) string {
		if timing != "" {
			timing = "," + timing
		}
		return fmt.Sprintf(`{"task":{"task_type_id":%q,"title":"t","params":%s}%s}`, typeID, params, timing)
	}
	sched := func(timing string) string { return schedOf(tt.ID, `{"days":1}`, timing) }
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	const D = api.MaxJSONDepth

	cases := []struct {
		name, method, path, auth, body string
		status                         int
		code, field                    string
	}{
		// Malformed bodies.
		{"malformed JSON", "POST", A + "/tasks", admin, `{"title":`, 400, "validation_failed", "body"},
		{"malformed JSON in the middle", "POST", A + "/tasks", admin, `{"title":"x",,}`, 400, "validation_failed", "body"},
		{"not an object", "POST", A + "/tasks", admin, `["title"]`, 400, "validation_failed", "body"},
		{"empty body", "POST", A + "/tasks", admin, ``, 400, "validation_failed", "body"},
		{"null body", "POST", A + "/tasks", admin, `null`, 400, "validation_failed", "body"},
		{"two objects", "POST", A + "/tasks", admin, task(`"priority":"low"`) + `{}`, 400, "validation_failed", "body"},
		{"unknown field", "POST", A + "/tasks", admin, task(`"colour":"red"`), 400, "validation_failed", "colour"},
		{"unknown field on login", "POST", "/api/v1/auth/login", "", `{"email":"a@b.c","password":"x","remember":true}`, 400, "validation_failed", "remember"},
		{"unknown field on status", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"status":"completed","note":"x"}`, 400, "validation_failed", "note"},
		{"wrong type: title", "POST", A + "/tasks", admin, fmt.Sprintf(`{"title":5,"task_type_id":%q}`, tt.ID), 400, "validation_failed", "title"},
		{"wrong type: priority", "POST", A + "/tasks", admin, task(`"priority":{"level":1}`), 400, "validation_failed", "priority"},
		{"wrong type: max_retries", "POST", A + "/task-types", admin, `{"name":"x","max_retries":"3"}`, 400, "validation_failed", "max_retries"},
		{"wrong type: status", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"status":true}`, 400, "validation_failed", "status"},
		{"wrong type: message", "POST", W + "/tasks/" + held.ID + "/updates", una, `{"message":["hi"]}`, 400, "validation_failed", "message"},
		{"wrong type: max_concurrent_tasks", "POST", A, admin, `{"email":"x@y.z","password":"long-enough","full_name":"X","max_concurrent_tasks":1.5}`, 400, "validation_failed", "max_concurrent_tasks"},

		// Values the domain refuses.
		{"unique key too long", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_key":"` + strings.Repeat("é", 201) + `"`), 400, "validation_failed", "unique_key"},
		{"blank unique key", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_key":"  "`), 400, "validation_failed", "unique_key"},
		{"unique_for negative", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_key":"k","unique_for":"-1h"`), 400, "validation_failed", "unique_for"},
		{"unique_for not a duration", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_key":"k","unique_for":"6 hours"`), 400, "validation_failed", "unique_for"},
		{"unique_for without a key", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_for":"6h"`), 400, "validation_failed", "unique_for"},
		{"bad on_duplicate", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_key":"k","on_duplicate":"ignore"`), 400, "validation_failed", "on_duplicate"},
		{"duplicate unique key", "POST", A + "/tasks", admin, task(`"params":{"days":1},"unique_key":"taken"`), 409, "duplicate_task", "unique_key"},
		{"bad priority", "POST", A + "/tasks", admin, task(`"params":{"days":1},"priority":"asap"`), 400, "validation_failed", "priority"},
		{"run_at not RFC 3339", "POST", A + "/tasks", admin, task(`"params":{"days":1},"run_at":"tomorrow at 9"`), 400, "validation_failed", "run_at"},
		{"run_at without a zone", "POST", A + "/tasks", admin, task(`"params":{"days":1},"run_at":"2030-01-02T09:00:00"`), 400, "validation_failed", "run_at"},
		{"run_at before 1970", "POST", A + "/tasks", admin, task(`"params":{"days":1},"run_at":"1969-12-31T23:59:59Z"`), 400, "validation_failed", "run_at"},
		{"run_at not a string", "POST", A + "/tasks", admin, task(`"params":{"days":1},"run_at":1893456000`), 400, "validation_failed", "run_at"},
		{"pause without a reason", "POST", A + "/task-types/" + tt.ID + "/pause", admin, `{"reason":"  "}`, 400, "validation_failed", "reason"},
		{"pause with no body", "POST", A + "/task-types/" + tt.ID + "/pause", admin, ``, 400, "validation_failed", "body"},
		{"resume a type that is not paused", "POST", A + "/task-types/" + tt.ID + "/resume", admin, ``, 409, "invalid_transition", ""},
		{"edit with a bad run_at", "PUT", A + "/tasks/" + pending.ID, admin, `{"run_at":"2030-13-01T00:00:00Z"}`, 400, "validation_failed", "run_at"},
		{"blank title", "POST", A + "/tasks", admin, fmt.Sprintf(`{"title":"  ","task_type_id":%q,"params":{"days":1}}`, tt.ID), 400, "validation_failed", "title"},
		{"missing task type", "POST", A + "/tasks", admin, `{"title":"t"}`, 400, "validation_failed", "task_type_id"},
		{"unknown task type", "POST", A + "/tasks", admin, fmt.Sprintf(`{"title":"t","task_type_id":%q}`, unknown), 422, "unknown_reference", "task_type_id"},
		{"assigned to nobody", "POST", A + "/tasks", admin, task(`"params":{"days":1},"assigned_to":"` + unknown + `"`), 422, "unknown_reference", "assigned_to"},
		{"assigned to a non-worker", "POST", A + "/tasks", admin, task(`"params":{"days":1},"assigned_to":"` + b.adminID + `"`), 422, "unknown_reference", "assigned_to"},
		{"bad status value", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"status":"done"}`, 400, "validation_failed", "status"},
		{"missing status", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"reason":"x"}`, 400, "validation_failed", "status"},
		{"bad failure kind", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"status":"failed","kind":"worker_offline"}`, 400, "validation_failed", "kind"},
		{"empty update", "POST", W + "/tasks/" + held.ID + "/updates", una, `{"message":"   "}`, 400, "validation_failed", "message"},
		{"missing result", "POST", W + "/tasks/" + held.ID + "/result", una, `{}`, 400, "validation_failed", "result"},
		{"null result", "POST", W + "/tasks/" + held.ID + "/result", una, `{"result":null}`, 400, "validation_failed", "result"},
		{"bad heartbeat status", "POST", W + "/heartbeat", una, `{"status":"sleepy"}`, 400, "validation_failed", "status"},
		// null is no value the document allows; encoding/json would take it as absent.
		{"null heartbeat status", "POST", W + "/heartbeat", una, `{"status":null}`, 400, "validation_failed", "status"},
		{"null in a nested field", "POST", S, admin, `{"task":{"title":null},"cron":"@daily"}`, 400, "validation_failed", "task.title"},
		{"null completion item", "POST", W + "/tasks/completions", una, `[null]`, 400, "validation_failed", "[0]"},
		{"heartbeat metadata not an object", "POST", W + "/heartbeat", una, `{"metadata":[1,2]}`, 400, "validation_failed", "metadata"},
		{"task type with a bad name", "POST", A + "/task-types", admin, `{"name":"Not Snake"}`, 400, "validation_failed", "name"},
		{"task type with a broken schema", "POST", A + "/task-types", admin, `{"name":"broken","param_schema":{"type":"nonsense"}}`, 400, "validation_failed", "param_schema"},
		{"task type with a schema that is not an object", "POST", A + "/task-types", admin, `{"name":"broken","param_schema":[1]}`, 400, "validation_failed", "param_schema"},
		{"task type with a remote $ref", "POST", A + "/task-types", admin, `{"name":"remote","param_schema":{"$ref":"https://example.com/s.json"}}`, 400, "validation_failed", "param_schema"},
		{"too many retries", "POST", A + "/task-types", admin, `{"name":"many","max_retries":1000}`, 400, "validation_failed", "max_retries"},
		{"concurrency_key not a JSON path", "POST", A + "/task-types", admin, `{"name":"keyed","concurrency_key":"ticker","max_in_progress_per_key":1}`, 400, "validation_failed", "concurrency_key"},
		{"concurrency_key with a broken step", "POST", A + "/task-types", admin, `{"name":"keyed","concurrency_key":"$.ticker[","max_in_progress_per_key":1}`, 400, "validation_failed", "concurrency_key"},
		{"per-key limit without a key", "POST", A + "/task-types", admin, `{"name":"keyed","max_in_progress_per_key":1}`, 400, "validation_failed", "concurrency_key"},
		{"a key without its limit", "POST", A + "/task-types", admin, `{"name":"keyed","concurrency_key":"$.ticker"}`, 400, "validation_failed", "max_in_progress_per_key"},
		{"rate_limit.count 0", "POST", A + "/task-types", admin, `{"name":"rated","rate_limit":{"count":0,"per":"1m"}}`, 400, "validation_failed", "rate_limit.count"},
		{"rate_limit.per not a duration", "POST", A + "/task-types", admin, `{"name":"rated","rate_limit":{"count":5,"per":"soon"}}`, 400, "validation_failed", "rate_limit.per"},
		{"rate_limit.per under a second", "PUT", A + "/task-types/" + tt.ID, admin, `{"name":"report","rate_limit":{"count":5,"per":"500ms"}}`, 400, "validation_failed", "rate_limit.per"},
		{"max_in_progress 0", "POST", A + "/task-types", admin, `{"name":"capped","max_in_progress":0}`, 400, "validation_failed", "max_in_progress"},
		{"max_in_progress negative", "PUT", A + "/task-types/" + tt.ID, admin, `{"name":"report","max_in_progress":-1}`, 400, "validation_failed", "max_in_progress"},
		{"rate_limit.count negative", "POST", A + "/task-types", admin, `{"name":"rated","rate_limit":{"count":-5,"per":"1m"}}`, 400, "validation_failed", "rate_limit.count"},
		{"rate_limit.per negative", "POST", A + "/task-types", admin, `{"name":"rated","rate_limit":{"count":5,"per":"-1m"}}`, 400, "validation_failed", "rate_limit.per"},
		{"rate_limit without per", "POST", A + "/task-types", admin, `{"name":"rated","rate_limit":{"count":5}}`, 400, "validation_failed", "rate_limit.per"},
		{"max_in_progress_per_key negative", "POST", A + "/task-types", admin, `{"name":"keyed","concurrency_key":"$.ticker","max_in_progress_per_key":-2}`, 400, "validation_failed", "max_in_progress_per_key"},
		{"concurrency_key that names nothing", "POST", A + "/task-types", admin, `{"name":"keyed","concurrency_key":"$","max_in_progress_per_key":1}`, 400, "validation_failed", "concurrency_key"},
		{"max_in_progress not a number", "POST", A + "/task-types", admin, `{"name":"capped","max_in_progress":"ten"}`, 400, "validation_failed", "max_in_progress"},
		{"duplicate task type", "POST", A + "/task-types", admin, `{"name":"report"}`, 409, "duplicate", "name"},
		{"duplicate worker email", "POST", A, admin, fmt.Sprintf(`{"email":%q,"password":"long-enough","full_name":"Again"}`, w1.Email), 409, "duplicate", "email"},
		{"short password", "POST", A, admin, `{"email":"new@example.com","password":"short","full_name":"New"}`, 400, "validation_failed", "password"},
		{"bad email", "POST", A, admin, `{"email":"not an email","password":"long-enough","full_name":"New"}`, 400, "validation_failed", "email"},
		{"limit too high", "POST", A, admin, `{"email":"new@example.com","password":"long-enough","full_name":"New","max_concurrent_tasks":1000}`, 400, "validation_failed", "max_concurrent_tasks"},
		{"bad list limit", "GET", A + "/tasks?limit=0", admin, "", 400, "validation_failed", "limit"},
		{"empty list limit", "GET", A + "/tasks?limit=", admin, "", 400, "validation_failed", "limit"},
		{"empty boolean", "GET", A + "/tasks?stuck=", admin, "", 400, "validation_failed", "stuck"},
		{"worker list limit 0", "GET", A + "?limit=0", admin, "", 400, "validation_failed", "limit"},
		{"worker list limit over the most", "GET", A + "?limit=201", admin, "", 400, "validation_failed", "limit"},
		{"worker list cursor not base64", "GET", A + "?after=%25%25", admin, "", 400, "validation_failed", "after"},
		{"worker list cursor without an id", "GET", A + "?after=" + base64.RawURLEncoding.EncodeToString([]byte("Ada|42")), admin, "", 400, "validation_failed", "after"},
		// Well formed but longer than any cursor the list hands out (a name is at most 200 characters, 800 bytes).
		{"worker list cursor over 1,200 characters", "GET", A + "?after=" + base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("a", 1000)+"|"+unknown)), admin, "", 400, "validation_failed", "after"},
		{"worker list cursor of a task", "GET", A + "?after=" + base64.RawURLEncoding.EncodeToString([]byte("Ada|"+strings.Repeat("x", 36))), admin, "", 400, "validation_failed", "after"},
		{"bad list status", "GET", A + "/tasks?status=sleeping", admin, "", 400, "validation_failed", "status"},
		{"bad list cursor", "GET", A + "/tasks?after=garbage", admin, "", 400, "validation_failed", "after"},
		{"bad list bool", "GET", A + "/tasks?unassigned=maybe", admin, "", 400, "validation_failed", "unassigned"},
		{"bad list type id", "GET", A + "/tasks?task_type_id=42", admin, "", 400, "validation_failed", "task_type_id"},

		// The admin UI's session cookie opens the event stream and nothing else of the API.
		{"stream with a forged session cookie", "GET", "/api/v1/admin/events/stream", "cookie:" + forged, "", 401, "unauthenticated", ""},
		{"stream with an expired session cookie", "GET", "/api/v1/admin/events/stream", "cookie:" + expired, "", 401, "unauthenticated", ""},
		{"stream with a worker's session cookie", "GET", "/api/v1/admin/events/stream", "cookie:" + una, "", 403, "forbidden", ""},
		{"API write with an admin's session cookie", "POST", A + "/tasks", "cookie:" + admin, task(`"params":{"days":1}`), 401, "unauthenticated", ""},
		{"API read with an admin's session cookie", "GET", A + "/tasks", "cookie:" + admin, "", 401, "unauthenticated", ""},

		// Params against the type's JSON Schema: the field is the JSON path.
		{"params: missing required", "POST", A + "/tasks", admin, task(`"params":{}`), 400, "validation_failed", "params"},
		{"params: wrong type", "POST", A + "/tasks", admin, task(`"params":{"days":"three"}`), 400, "validation_failed", "params.days"},
		{"params: below minimum", "POST", A + "/tasks", admin, task(`"params":{"days":0}`), 400, "validation_failed", "params.days"},
		{"params: array item", "POST", A + "/tasks", admin, task(`"params":{"days":1,"tags":["ok",7]}`), 400, "validation_failed", "params.tags.1"},
		{"params: nested object", "POST", A + "/tasks", admin, task(`"params":{"days":1,"owner":{"email":5}}`), 400, "validation_failed", "params.owner.email"},
		{"params: not an object", "POST", A + "/tasks", admin, task(`"params":[1]`), 400, "validation_failed", "params"},

		// JSON that encoding/json accepts but nobody can hold as written (issue 11).
		{"params: 1e400 for an integer", "POST", A + "/tasks", admin, task(`"params":{"days":1e400}`), 400, "validation_failed", "params.days"},
		{"params: a 30-digit integer", "POST", A + "/tasks", admin, task(`"params":{"days":123456789012345678901234567890}`), 400, "validation_failed", "params.days"},
		{"duplicate key", "POST", A + "/tasks", admin, fmt.Sprintf(`{"title":"a","title":"b","task_type_id":%q,"params":{"days":1}}`, tt.ID), 400, "validation_failed", "title"},
		{"duplicate key in params", "POST", A + "/tasks", admin, task(`"params":{"days":1,"days":2}`), 400, "validation_failed", "params.days"},
		{"invalid UTF-8", "POST", A + "/tasks", admin, task(`"params":{"days":1},"description":"caf` + "\xe9" + `"`), 400, "validation_failed", "description"},
		{"invalid UTF-8 in params", "POST", A + "/tasks", admin, task(`"params":{"days":1,"tags":["ok","` + "\xff\xfe" + `"]}`), 400, "validation_failed", "params.tags.1"},
		{"task type whose schema refers to itself", "POST", A + "/task-types", admin, `{"name":"cycle","param_schema":{"$ref":"#"}}`, 400, "validation_failed", "param_schema"},
		{"task type with a cycle through $defs", "POST", A + "/task-types", admin, `{"name":"cycle","param_schema":{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}}`, 400, "validation_failed", "param_schema"},
		{"task type update with a cycle", "PUT", A + "/task-types/" + tt.ID, admin, `{"name":"report","param_schema":{"type":"object","properties":{"a":{"$ref":"#/properties/a"}}}}`, 400, "validation_failed", "param_schema"},
		{"task type with an unresolvable $ref", "POST", A + "/task-types", admin, `{"name":"dangling","param_schema":{"$ref":"#/$defs/nope"}}`, 400, "validation_failed", "param_schema"},

		// Query strings: only the declared parameters, each once unless a list (issue 11).
		{"query: ';' in a value", "GET", "/api/v1/admin/events?type=task.created;x", admin, "", 400, "validation_failed", "type"},
		{"query: unknown parameter", "GET", A + "/tasks?bogus=1", admin, "", 400, "validation_failed", "bogus"},
		{"query: parameter given twice", "GET", A + "/tasks?limit=1&limit=2", admin, "", 400, "validation_failed", "limit"},
		{"query: on a route that takes none", "GET", A + "/capacity?verbose=1", admin, "", 400, "validation_failed", "verbose"},
		{"query: worker route", "GET", W + "/tasks?all=true&all=false", una, "", 400, "validation_failed", "all"},
		{"query: bad escape", "GET", A + "/tasks?status=%zz", admin, "", 400, "validation_failed", "status"},
		{"query: on a write", "POST", A + "/tasks?dry_run=1", admin, task(`"params":{"days":1}`), 400, "validation_failed", "dry_run"},
		{"params: edit breaks the schema", "PUT", A + "/tasks/" + pending.ID, admin, `{"params":{"days":-1}}`, 400, "validation_failed", "params.days"},

		// NUL cannot be stored in PostgreSQL text or jsonb: a 400 naming the
		// field, never a 500.
		{"NUL in title", "POST", A + "/tasks", admin, fmt.Sprintf(`{"title":"a\u0000b","task_type_id":%q,"params":{"days":1}}`, tt.ID), 400, "validation_failed", "title"},
		{"NUL in params", "POST", A + "/tasks", admin, task(`"params":{"days":1,"note":"x\u0000"}`), 400, "validation_failed", "params.note"},
		{"NUL in a params key", "POST", A + "/tasks", admin, task(`"params":{"days":1,"a\u0000":1}`), 400, "validation_failed", "params"},
		{"NUL in update", "POST", W + "/tasks/" + held.ID + "/updates", una, `{"message":"\u0000"}`, 400, "validation_failed", "message"},
		{"NUL in result", "POST", W + "/tasks/" + held.ID + "/result", una, `{"result":{"list":["ok","\u0000"]}}`, 400, "validation_failed", "result.list.1"},
		{"NUL in failure reason", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"status":"failed","reason":"\u0000"}`, 400, "validation_failed", "reason"},
		{"NUL in cancel reason", "POST", A + "/tasks/" + pending.ID + "/cancel", admin, `{"reason":"\u0000"}`, 400, "validation_failed", "reason"},
		{"NUL in heartbeat metadata", "POST", W + "/heartbeat", una, `{"metadata":{"k":"\u0000"}}`, 400, "validation_failed", "metadata.k"},
		{"NUL in worker name", "POST", A, admin, `{"email":"nul@example.com","password":"long-enough","full_name":"N\u0000"}`, 400, "validation_failed", "full_name"},
		{"NUL in login email", "POST", "/api/v1/auth/login", "", `{"email":"a\u0000@example.com","password":"whatever1"}`, 400, "validation_failed", "email"},
		{"NUL in SOP", "POST", A + "/task-types", admin, `{"name":"nul","sop":"\u0000"}`, 400, "validation_failed", "sop"},
		{"NUL in query", "GET", A + "/tasks?after=" + base64.RawURLEncoding.EncodeToString([]byte("2026-01-01T00:00:00Z|"+strings.Repeat("\x00", 36))), admin, "", 400, "validation_failed", ""},
		{"escaped backslash before u0000 is text", "POST", W + "/tasks/" + held.ID + "/updates", duo, `{"message":"C:\\u0000"}`, 403, "forbidden", ""},

		// Values PostgreSQL would refuse deep inside or that no one needs.
		{"email too long to index", "POST", A, admin, `{"email":"` + strings.Repeat("a", 3000) + `@example.com","password":"long-enough","full_name":"Long"}`, 400, "validation_failed", "email"},
		{"number beyond numeric", "POST", W + "/tasks/" + held.ID + "/result", una, `{"result":1e1000000}`, 400, "validation_failed", ""},
		{"number beyond numeric in params", "POST", A + "/tasks", admin, task(`"params":{"days":1,"big":-1e200000}`), 400, "validation_failed", ""},
		{"metadata too big", "POST", W + "/heartbeat", una, `{"metadata":` + strings.Repeat(`{"a":`, 9000) + `1` + strings.Repeat("}", 9000) + `}`, 400, "validation_failed", ""},

		// Nesting past MaxJSONDepth levels inside a field, refused before the
		// body is parsed, naming the field.
		{"result nested too deep", "POST", W + "/tasks/" + held.ID + "/result", una, `{"result":` + deep(D+1) + `}`, 400, "validation_failed", "result"},
		{"result nested 9,000 deep", "POST", W + "/tasks/" + held.ID + "/result", una, `{"result":` + deep(9000) + `}`, 400, "validation_failed", "result"},
		{"params nested too deep", "POST", A + "/tasks", admin, task(`"params":{"days":1,"x":` + deep(D) + `}`), 400, "validation_failed", "params"},
		{"edited params nested too deep", "PUT", A + "/tasks/" + pending.ID, admin, `{"params":{"days":1,"x":` + deep(D) + `}}`, 400, "validation_failed", "params"},
		{"heartbeat metadata nested too deep", "POST", W + "/heartbeat", una, `{"metadata":{"a":` + deep(D) + `}}`, 400, "validation_failed", "metadata"},
		// A type's body nests two levels (rate_limit is an object), so its
		// fields may nest one level deeper than a task's, and the error
		// names the field down to that level.
		{"param_schema nested too deep", "POST", A + "/task-types", admin, `{"name":"deep","param_schema":{"a":` + deep(D+1) + `}}`, 400, "validation_failed", "param_schema.a"},
		{"schedule params nested too deep", "POST", S, admin, schedOf(tt.ID, `{"days":1,"x":`+deep(D)+`}`, `"cron":"@daily"`), 400, "validation_failed", "task.params"},
		{"schedule edit params nested too deep", "PUT", S + "/" + live.ID, admin, `{"task":{"params":{"days":1,"x":` + deep(D) + `}}}`, 400, "validation_failed", "task.params"},
		{"completions: result nested too deep", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed","result":%s}]`, held.ID, deep(D+1)), 400, "validation_failed", "[0].result"},
		{"a typed field nested deep", "POST", A + "/tasks", admin, task(`"priority":` + deep(D+5)), 400, "validation_failed", "priority"},

		// A lone UTF-16 surrogate cannot be held as text: refused in plain
		// strings as in free-form JSON, naming the field.
		{"lone surrogate in title", "POST", A + "/tasks", admin, fmt.Sprintf(`{"title":"a\ud800b","task_type_id":%q,"params":{"days":1}}`, tt.ID), 400, "validation_failed", "title"},
		{"lone low surrogate in an update", "POST", W + "/tasks/" + held.ID + "/updates", una, `{"message":"\udc00"}`, 400, "validation_failed", "message"},
		{"high surrogate without its low half", "PUT", W + "/tasks/" + held.ID + "/status", una, `{"status":"failed","reason":"x\ud83d\u0041"}`, 400, "validation_failed", "reason"},
		{"lone surrogate in a result", "POST", W + "/tasks/" + held.ID + "/result", una, `{"result":{"k":["ok","\ud800"]}}`, 400, "validation_failed", "result.k.1"},
		{"lone surrogate in a metadata key", "POST", W + "/heartbeat", una, `{"metadata":{"\ud800":1}}`, 400, "validation_failed", "metadata"},
		{"lone surrogate in a worker's name", "POST", A, admin, `{"email":"s@example.com","password":"long-enough","full_name":"\udfff"}`, 400, "validation_failed", "full_name"},
		{"lone surrogate in a schedule's name", "POST", S, admin, sched(`"cron":"@daily","name":"\udbff"`), 400, "validation_failed", "name"},
		{"lone surrogate in a completion", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"failed","reason":"\ud800"}]`, held.ID), 400, "validation_failed", "[0].reason"},
		{"a surrogate pair is text", "POST", W + "/tasks/" + held.ID + "/updates", duo, `{"message":"\ud83d\ude00"}`, 403, "forbidden", ""},
		{"escaped backslash before ud800 is text", "POST", W + "/tasks/" + held.ID + "/updates", duo, `{"message":"C:\\ud800"}`, 403, "forbidden", ""},

		// Oversize bodies.
		{"oversize task", "POST", A + "/tasks", admin, big, 413, "too_large", ""},
		{"oversize login", "POST", "/api/v1/auth/login", "", big, 413, "too_large", ""},
		{"oversize heartbeat", "POST", W + "/heartbeat", una, big, 413, "too_large", ""},
		{"oversize update", "POST", W + "/tasks/" + held.ID + "/updates", una, `{"message":"` + strings.Repeat("x", api.MaxBodyBytes+10) + `"}`, 413, "too_large", ""},

		// Bad UUIDs.
		{"bad id in admin path", "GET", A + "/tasks/not-a-uuid", admin, "", 400, "validation_failed", "id"},
		{"bad id in worker path", "PUT", W + "/tasks/1234/status", una, `{"status":"completed"}`, 400, "validation_failed", "id"},
		{"uuid with extra chars", "GET", A + "/tasks/" + held.ID + "0", admin, "", 400, "validation_failed", "id"},
		{"bad id in task type path", "PUT", A + "/task-types/xyz", admin, `{"name":"report"}`, 400, "validation_failed", "id"},
		{"bad id in body", "POST", A + "/tasks", admin, `{"title":"t","task_type_id":"not-a-uuid"}`, 400, "validation_failed", "task_type_id"},
		{"bad assignee in body", "POST", A + "/tasks/" + pending.ID + "/assign", admin, `{"assigned_to":"nope","reason":"r"}`, 400, "validation_failed", "assigned_to"},
		{"bad current task in heartbeat", "POST", W + "/heartbeat", una, `{"current_task_id":"nope"}`, 400, "validation_failed", "current_task_id"},

		// Unknown ids.
		{"unknown task", "GET", A + "/tasks/" + unknown, admin, "", 404, "not_found", ""},
		{"unknown task events", "GET", A + "/tasks/" + unknown + "/events", admin, "", 404, "not_found", ""},
		{"unknown task type", "GET", A + "/task-types/" + unknown, admin, "", 404, "not_found", ""},
		{"update unknown task type", "PUT", A + "/task-types/" + unknown, admin, `{"name":"report"}`, 404, "not_found", ""},
		{"cancel unknown task", "POST", A + "/tasks/" + unknown + "/cancel", admin, `{}`, 404, "not_found", ""},
		{"edit unknown task", "PUT", A + "/tasks/" + unknown, admin, `{"title":"x"}`, 404, "not_found", ""},
		{"edit unknown task's params", "PUT", A + "/tasks/" + unknown, admin, `{"params":{"days":1}}`, 404, "not_found", ""},
		{"assign unknown task", "POST", A + "/tasks/" + unknown + "/assign", admin, fmt.Sprintf(`{"assigned_to":%q,"reason":"r"}`, w1.ID), 404, "not_found", ""},
		{"assign to unknown worker", "POST", A + "/tasks/" + pending.ID + "/assign", admin, fmt.Sprintf(`{"assigned_to":%q,"reason":"r"}`, unknown), 422, "unknown_reference", "assigned_to"},
		{"complete unknown task", "PUT", W + "/tasks/" + unknown + "/status", una, `{"status":"completed"}`, 404, "not_found", ""},
		{"read unknown task as worker", "GET", W + "/tasks/" + unknown, una, "", 404, "not_found", ""},
		{"login unknown email", "POST", "/api/v1/auth/login", "", `{"email":"ghost@example.com","password":"whatever1"}`, 401, "unauthenticated", ""},
		{"login wrong password", "POST", "/api/v1/auth/login", "", fmt.Sprintf(`{"email":%q,"password":"wrong-password"}`, w1.Email), 401, "unauthenticated", ""},
		{"login without password", "POST", "/api/v1/auth/login", "", `{"email":"a@b.c"}`, 400, "validation_failed", "password"},

		// Invalid transitions.
		{"complete a completed task", "PUT", W + "/tasks/" + doneTask.ID + "/status", una, `{"status":"completed"}`, 409, "invalid_transition", ""},
		{"fail a completed task", "PUT", W + "/tasks/" + doneTask.ID + "/status", una, `{"status":"failed","reason":"late"}`, 409, "invalid_transition", ""},
		{"release a completed task", "POST", W + "/tasks/" + doneTask.ID + "/release", una, `{}`, 409, "invalid_transition", ""},
		{"result on a completed task", "POST", W + "/tasks/" + doneTask.ID + "/result", una, `{"result":1}`, 409, "invalid_transition", ""},
		{"update on a completed task", "POST", W + "/tasks/" + doneTask.ID + "/updates", una, `{"message":"hi"}`, 409, "invalid_transition", ""},
		{"complete a reserved task before claiming it", "PUT", W + "/tasks/" + forW2.ID + "/status", duo, `{"status":"completed"}`, 409, "invalid_transition", ""},
		{"cancel a completed task", "POST", A + "/tasks/" + doneTask.ID + "/cancel", admin, `{}`, 409, "invalid_transition", ""},
		{"cancel a cancelled task", "POST", A + "/tasks/" + cancelled.ID + "/cancel", admin, `{"reason":"again"}`, 409, "invalid_transition", ""},
		{"edit a task in progress", "PUT", A + "/tasks/" + held.ID, admin, `{"title":"new"}`, 409, "invalid_transition", ""},
		{"assign a task in progress", "POST", A + "/tasks/" + held.ID + "/assign", admin, fmt.Sprintf(`{"assigned_to":%q,"reason":"r"}`, w2.ID), 409, "invalid_transition", ""},

		// Another worker's task.
		{"complete another worker's task", "PUT", W + "/tasks/" + held.ID + "/status", duo, `{"status":"completed"}`, 403, "forbidden", ""},
		{"fail another worker's task", "PUT", W + "/tasks/" + held.ID + "/status", duo, `{"status":"failed"}`, 403, "forbidden", ""},
		{"release another worker's task", "POST", W + "/tasks/" + held.ID + "/release", duo, ``, 403, "forbidden", ""},
		{"update another worker's task", "POST", W + "/tasks/" + held.ID + "/updates", duo, `{"message":"mine now"}`, 403, "forbidden", ""},
		{"result on another worker's task", "POST", W + "/tasks/" + held.ID + "/result", duo, `{"result":{}}`, 403, "forbidden", ""},
		{"read another worker's task", "GET", W + "/tasks/" + held.ID, duo, "", 403, "forbidden", ""},
		{"read a task reserved for another", "GET", W + "/tasks/" + forW2.ID, una, "", 403, "forbidden", ""},
		{"complete a pool task never claimed", "PUT", W + "/tasks/" + pending.ID + "/status", una, `{"status":"completed"}`, 403, "forbidden", ""},

		// The batched lane (ADR 016): a malformed request or item is refused
		// whole, naming the item; nothing changes.
		{"claims: max 0", "POST", W + "/tasks/claims", una, `{"max":0}`, 400, "validation_failed", "max"},
		{"claims: max over 100", "POST", W + "/tasks/claims", una, `{"max":101}`, 400, "validation_failed", "max"},
		{"claims: no max", "POST", W + "/tasks/claims", una, `{"wait":5}`, 400, "validation_failed", "max"},
		{"claims: max not a number", "POST", W + "/tasks/claims", una, `{"max":"ten"}`, 400, "validation_failed", "max"},
		{"claims: negative wait", "POST", W + "/tasks/claims", una, `{"max":1,"wait":-1}`, 400, "validation_failed", "wait"},
		{"claims: wait over a minute", "POST", W + "/tasks/claims", una, `{"max":1,"wait":61}`, 400, "validation_failed", "wait"},
		{"claims: unknown field", "POST", W + "/tasks/claims", una, `{"max":1,"limit":2}`, 400, "validation_failed", "limit"},
		{"claims: empty body", "POST", W + "/tasks/claims", una, ``, 400, "validation_failed", "body"},
		{"claims by an admin", "POST", W + "/tasks/claims", admin, `{"max":1}`, 403, "forbidden", ""},
		{"completions: empty list", "POST", W + "/tasks/completions", una, `[]`, 400, "validation_failed", "body"},
		{"completions: an object, not a list", "POST", W + "/tasks/completions", una, fmt.Sprintf(`{"id":%q,"status":"completed"}`, held.ID), 400, "validation_failed", "body"},
		{"completions: no body", "POST", W + "/tasks/completions", una, ``, 400, "validation_failed", "body"},
		{"completions: malformed JSON", "POST", W + "/tasks/completions", una, `[{"id":`, 400, "validation_failed", "body"},
		{"completions: duplicate ids", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed"},{"id":%q,"status":"failed"}]`, held.ID, held.ID), 400, "validation_failed", "[1].id"},
		{"completions: duplicate ids in other spellings", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed"},{"id":%q,"status":"completed"}]`, held.ID, strings.ToUpper(held.ID)), 400, "validation_failed", "[1].id"},
		{"completions: another worker's task", "POST", W + "/tasks/completions", duo, fmt.Sprintf(`[{"id":%q,"status":"completed"}]`, held.ID), 403, "forbidden", "[0].id"},
		{"completions: another worker's task after a good one", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed"},{"id":%q,"status":"completed"}]`, held.ID, forW2.ID), 403, "forbidden", "[1].id"},
		{"completions: a pool task never claimed", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed"},{"id":%q,"status":"failed"}]`, held.ID, pending.ID), 403, "forbidden", "[1].id"},
		{"completions: item not an object", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed"},7]`, held.ID), 400, "validation_failed", "[1]"},
		{"completions: missing id", "POST", W + "/tasks/completions", una, `[{"status":"completed"}]`, 400, "validation_failed", "[0].id"},
		{"completions: bad id", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed"},{"id":"42","status":"completed"}]`, held.ID), 400, "validation_failed", "[1].id"},
		{"completions: missing status", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q}]`, held.ID), 400, "validation_failed", "[0].status"},
		{"completions: bad status", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"released"}]`, held.ID), 400, "validation_failed", "[0].status"},
		{"completions: kind on a completion", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed","kind":"timeout"}]`, held.ID), 400, "validation_failed", "[0].kind"},
		{"completions: bad failure kind", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"failed","kind":"worker_offline"}]`, held.ID), 400, "validation_failed", "[0].kind"},
		{"completions: reason too long", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"failed","reason":%q}]`, held.ID, strings.Repeat("r", events.MaxReasonLen+1)), 400, "validation_failed", "[0].reason"},
		{"completions: unknown field", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed","note":"x"}]`, held.ID), 400, "validation_failed", "[0].note"},
		{"completions: NUL in a result", "POST", W + "/tasks/completions", una, fmt.Sprintf(`[{"id":%q,"status":"completed","result":{"a":["\u0000"]}}]`, held.ID), 400, "validation_failed", "[0].result.a.0"},
		{"completions: too many items", "POST", W + "/tasks/completions", una, "[" + strings.Repeat(fmt.Sprintf(`{"id":%q,"status":"completed"},`, held.ID), 100) + fmt.Sprintf(`{"id":%q,"status":"completed"}]`, held.ID), 400, "validation_failed", "body"},
		{"completions: oversize", "POST", W + "/tasks/completions", una, `[{"id":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}]`, 413, "too_large", ""},
		{"completions by an admin", "POST", W + "/tasks/completions", admin, fmt.Sprintf(`[{"id":%q,"status":"completed"}]`, held.ID), 403, "forbidden", ""},

		// Schedules (issue 13): each refusal names the field; nothing is stored.
		{"schedule: interval under a minute", "POST", S, admin, sched(`"interval":{"every":30,"unit":"seconds"}`), 400, "validation_failed", "interval"},
		{"schedule: interval of 0", "POST", S, admin, sched(`"interval":{"every":0,"unit":"hours"}`), 400, "validation_failed", "interval.every"},
		{"schedule: unknown unit", "POST", S, admin, sched(`"interval":{"every":1,"unit":"fortnights"}`), 400, "validation_failed", "interval.unit"},
		{"schedule: interval not an object", "POST", S, admin, sched(`"interval":"5m"`), 400, "validation_failed", "interval"},
		{"schedule: unknown time zone", "POST", S, admin, sched(`"cron":"0 6 * * 1-5","time_zone":"Europe/Atlantis"`), 400, "validation_failed", "time_zone"},
		{"schedule: malformed cron", "POST", S, admin, sched(`"cron":"0 6 * *"`), 400, "validation_failed", "cron"},
		{"schedule: cron out of range", "POST", S, admin, sched(`"cron":"61 6 * * *"`), 400, "validation_failed", "cron"},
		{"schedule: interval and cron", "POST", S, admin, sched(`"cron":"@daily","interval":{"every":1,"unit":"days"}`), 400, "validation_failed", "cron"},
		{"schedule: end before start", "POST", S, admin, sched(`"interval":{"every":1,"unit":"days"},"start_at":"2030-01-02T00:00:00Z","end_at":"2030-01-01T00:00:00Z"`), 400, "validation_failed", "end_at"},
		{"schedule: one time without start", "POST", S, admin, sched(``), 400, "validation_failed", "start_at"},
		{"schedule: archived type", "POST", S, admin, schedOf(oldType.ID, `{"days":1}`, `"cron":"@daily"`), 409, "conflict", "task.task_type_id"},
		{"schedule: unknown type", "POST", S, admin, schedOf(unknown, `{"days":1}`, `"cron":"@daily"`), 422, "unknown_reference", "task.task_type_id"},
		{"schedule: bad type id", "POST", S, admin, schedOf("42", `{"days":1}`, `"cron":"@daily"`), 400, "validation_failed", "task.task_type_id"},
		{"schedule: params break the schema", "POST", S, admin, schedOf(tt.ID, `{"days":"seven"}`, `"cron":"@daily"`), 400, "validation_failed", "task.params.days"},
		{"schedule: params miss a required field", "POST", S, admin, schedOf(tt.ID, `{}`, `"cron":"@daily"`), 400, "validation_failed", "task.params"},
		{"schedule: assigned to nobody", "POST", S, admin, fmt.Sprintf(`{"task":{"task_type_id":%q,"title":"t","params":{"days":1},"assigned_to":%q},"cron":"@daily"}`, tt.ID, unknown), 422, "unknown_reference", "task.assigned_to"},
		{"schedule: no title", "POST", S, admin, fmt.Sprintf(`{"task":{"task_type_id":%q,"params":{"days":1}},"cron":"@daily"}`, tt.ID), 400, "validation_failed", "task.title"},
		{"schedule: NUL in title", "POST", S, admin, fmt.Sprintf(`{"task":{"task_type_id":%q,"title":"a\u0000","params":{"days":1}},"cron":"@daily"}`, tt.ID), 400, "validation_failed", "task.title"},
		{"schedule: bad overlap", "POST", S, admin, sched(`"cron":"@daily","overlap":"queue"`), 400, "validation_failed", "overlap"},
		{"schedule: negative max_failures", "POST", S, admin, sched(`"cron":"@daily","max_failures":-1`), 400, "validation_failed", "max_failures"},
		{"schedule: negative max_runs", "POST", S, admin, sched(`"cron":"@daily","max_runs":-1`), 400, "validation_failed", "max_runs"},
		{"schedule: unknown field", "POST", S, admin, sched(`"cron":"@daily","every":"5m"`), 400, "validation_failed", "every"},
		{"schedule: empty body", "POST", S, admin, ``, 400, "validation_failed", "body"},
		{"schedule edit: interval under a minute", "PUT", S + "/" + live.ID, admin, `{"interval":{"every":10,"unit":"seconds"}}`, 400, "validation_failed", "interval"},
		{"schedule edit: params break the schema", "PUT", S + "/" + live.ID, admin, `{"task":{"params":{"days":0}}}`, 400, "validation_failed", "task.params.days"},
		{"schedule edit: unknown field", "PUT", S + "/" + live.ID, admin, `{"colour":"red"}`, 400, "validation_failed", "colour"},
		{"schedule edit: cancelled", "PUT", S + "/" + gone.ID, admin, `{"name":"again"}`, 409, "invalid_transition", ""},
		{"schedule edit: unknown", "PUT", S + "/" + unknown, admin, `{"name":"x"}`, 404, "not_found", ""},
		{"schedule edit: bad id", "PUT", S + "/nope", admin, `{"name":"x"}`, 400, "validation_failed", "id"},
		{"schedule: resume an active one", "POST", S + "/" + live.ID + "/resume", admin, ``, 409, "invalid_transition", ""},
		{"schedule: pause a cancelled one", "POST", S + "/" + gone.ID + "/pause", admin, ``, 409, "invalid_transition", ""},
		{"schedule: cancel a cancelled one", "POST", S + "/" + gone.ID + "/cancel", admin, `{"reason":"again"}`, 409, "invalid_transition", ""},
		{"schedule: run a cancelled one", "POST", S + "/" + gone.ID + "/run", admin, ``, 409, "invalid_transition", ""},
		{"schedule: NUL in pause reason", "POST", S + "/" + live.ID + "/pause", admin, `{"reason":"\u0000"}`, 400, "validation_failed", "reason"},
		{"schedule: unknown", "GET", S + "/" + unknown, admin, "", 404, "not_found", ""},
		{"schedule: unknown executions", "GET", S + "/" + unknown + "/executions", admin, "", 404, "not_found", ""},
		{"schedule: unknown stats", "GET", S + "/" + unknown + "/stats", admin, "", 404, "not_found", ""},
		{"schedule: run an unknown one", "POST", S + "/" + unknown + "/run", admin, ``, 404, "not_found", ""},
		{"schedules: bad state", "GET", S + "?state=sleeping", admin, "", 400, "validation_failed", "state"},
		{"schedules: bad limit", "GET", S + "?limit=0", admin, "", 400, "validation_failed", "limit"},
		{"schedules: bad executions page", "GET", S + "/" + live.ID + "/executions?before=-3", admin, "", 400, "validation_failed", "before"},
		{"schedules: a worker lists them", "GET", S, una, "", 403, "forbidden", ""},
		{"schedules: a worker runs one", "POST", S + "/" + live.ID + "/run", una, ``, 403, "forbidden", ""},

		// Authentication.
		{"no token", "POST", W + "/tasks/claim", "", "", 401, "unauthenticated", ""},
		{"no token on admin", "GET", A + "/tasks", "", "", 401, "unauthenticated", ""},
		{"empty bearer", "POST", W + "/tasks/claim", " ", "", 401, "unauthenticated", ""},
		{"garbage token", "POST", W + "/tasks/claim", "not.a.jwt", "", 401, "unauthenticated", ""},
		{"expired token", "POST", W + "/tasks/claim", expired, "", 401, "unauthenticated", ""},
		{"expired token on a write", "PUT", W + "/tasks/" + held.ID + "/status", expired, `{"status":"completed"}`, 401, "unauthenticated", ""},
		{"forged token", "POST", W + "/tasks/claim", forged, "", 401, "unauthenticated", ""},
		{"forged token on admin", "GET", A, forged, "", 401, "unauthenticated", ""},
		{"tampered token", "GET", A, tampered, "", 401, "unauthenticated", ""},
		// Bulk actions: a bad request acts on nothing, not even the tasks
		// its filter would match.
		{"bulk: unknown action", "POST", A + "/tasks/bulk", admin, `{"action":"delete","filter":{"status":"pending"},"reason":"x"}`, 400, "validation_failed", "action"},
		{"bulk: no action", "POST", A + "/tasks/bulk", admin, `{"filter":{"status":"pending"},"reason":"x"}`, 400, "validation_failed", "action"},
		{"bulk: no filter", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","reason":"x"}`, 400, "validation_failed", "filter"},
		{"bulk: empty filter", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{},"reason":"x"}`, 400, "validation_failed", "filter"},
		{"bulk: blank search is no filter", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"q":"  "},"reason":"x"}`, 400, "validation_failed", "filter"},
		{"bulk: unknown status", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"status":"stalled"},"reason":"x"}`, 400, "validation_failed", "filter.status"},
		{"bulk: unknown priority", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"priority":"asap"},"reason":"x"}`, 400, "validation_failed", "filter.priority"},
		{"bulk: bad type id", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"task_type_id":"report"},"reason":"x"}`, 400, "validation_failed", "filter.task_type_id"},
		{"bulk: bad assignee", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"assigned_to":"Una"},"reason":"x"}`, 400, "validation_failed", "filter.assigned_to"},
		{"bulk: unknown filter field", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"colour":"red"},"reason":"x"}`, 400, "validation_failed", "colour"},
		{"bulk: search too long", "POST", A + "/tasks/bulk", admin, fmt.Sprintf(`{"action":"cancel","filter":{"q":%q},"reason":"x"}`, strings.Repeat("q", 201)), 400, "validation_failed", "filter.q"},
		{"bulk: cancel without a reason", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"status":"pending"}}`, 400, "validation_failed", "reason"},
		{"bulk: cancel reason too long", "POST", A + "/tasks/bulk", admin, fmt.Sprintf(`{"action":"cancel","filter":{"status":"pending"},"reason":%q}`, strings.Repeat("r", events.MaxReasonLen+1)), 400, "validation_failed", "reason"},
		{"bulk: retry hint too long", "POST", A + "/tasks/bulk", admin, fmt.Sprintf(`{"action":"retry","filter":{"status":"failed"},"reason":%q}`, strings.Repeat("h", 1001)), 400, "validation_failed", "reason"},
		{"bulk: limit 0", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"status":"pending"},"reason":"x","limit":0}`, 400, "validation_failed", "limit"},
		{"bulk: limit over 1,000", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"status":"pending"},"reason":"x","limit":1001}`, 400, "validation_failed", "limit"},
		{"bulk: bad cursor", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":{"status":"pending"},"reason":"x","after":"page-2"}`, 400, "validation_failed", "after"},
		{"bulk: filter not an object", "POST", A + "/tasks/bulk", admin, `{"action":"cancel","filter":"pending","reason":"x"}`, 400, "validation_failed", "filter"},
		{"bulk: empty body", "POST", A + "/tasks/bulk", admin, ``, 400, "validation_failed", "body"},
		{"bulk by a worker", "POST", A + "/tasks/bulk", una, `{"action":"cancel","filter":{"status":"pending"},"reason":"x"}`, 403, "forbidden", ""},
		{"list: stuck not a boolean", "GET", A + "/tasks?stuck=maybe", admin, "", 400, "validation_failed", "stuck"},
		{"list: search too long", "GET", A + "/tasks?q=" + strings.Repeat("q", 201), admin, "", 400, "validation_failed", "q"},

		{"alg none", "POST", W + "/tasks/claim", algNone, "", 401, "unauthenticated", ""},
		{"HS512 token", "POST", W + "/tasks/claim", hs512, "", 401, "unauthenticated", ""},
		{"token without expiry", "POST", W + "/tasks/claim", noExpiry, "", 401, "unauthenticated", ""},
		{"token of another issuer", "POST", W + "/tasks/claim", wrongIssuer, "", 401, "unauthenticated", ""},
		{"token without subject", "POST", W + "/tasks/claim", noSubject, "", 401, "unauthenticated", ""},
		{"basic auth", "GET", A, "basic:admin:admin", "", 401, "unauthenticated", ""},

		// Roles.
		{"worker lists workers", "GET", A, una, "", 403, "forbidden", ""},
		{"worker creates a task", "POST", A + "/tasks", una, task(`"params":{"days":1}`), 403, "forbidden", ""},
		{"worker creates a worker", "POST", A, una, `{"email":"evil@example.com","password":"long-enough","full_name":"Evil","is_admin":true}`, 403, "forbidden", ""},
		{"worker cancels a task", "POST", A + "/tasks/" + pending.ID + "/cancel", una, `{}`, 403, "forbidden", ""},
		{"worker reads events", "GET", A + "/tasks/" + held.ID + "/events", una, "", 403, "forbidden", ""},
		{"admin claims", "POST", W + "/tasks/claim", admin, "", 403, "forbidden", ""},
		{"admin completes", "PUT", W + "/tasks/" + held.ID + "/status", admin, `{"status":"completed"}`, 403, "forbidden", ""},
		{"admin heartbeats", "POST", W + "/heartbeat", admin, `{}`, 403, "forbidden", ""},

		// Task data (issue 14): refused before a byte is stored; no event, no object.
		{"upload: not the holder", "POST", W + "/tasks/" + held.ID + "/data?data_type=posts&filename=a.jsonl", duo, `{"x":1}`, 403, "forbidden", ""},
		{"upload: finished task", "POST", W + "/tasks/" + doneTask.ID + "/data?data_type=posts&filename=a.jsonl", una, `{"x":1}`, 409, "invalid_transition", ""},
		{"upload: traversal filename", "POST", W + "/tasks/" + held.ID + "/data?data_type=posts&filename=..%2F..%2Fetc%2Fpasswd", una, `{"x":1}`, 400, "validation_failed", "filename"},
		{"upload: traversal data_type", "POST", W + "/tasks/" + held.ID + "/data?data_type=..&filename=a.jsonl", una, `{"x":1}`, 400, "validation_failed", "data_type"},
		{"upload: missing data_type", "POST", W + "/tasks/" + held.ID + "/data?filename=a.jsonl", una, `{"x":1}`, 400, "validation_failed", "data_type"},
		{"upload: by an admin", "POST", W + "/tasks/" + held.ID + "/data?data_type=posts&filename=a.jsonl", admin, `{"x":1}`, 403, "forbidden", ""},
		{"data: not the worker's task", "GET", W + "/tasks/" + held.ID + "/data", duo, "", 403, "forbidden", ""},
		{"data: bad data id", "GET", A + "/tasks/" + held.ID + "/data/not-a-uuid", admin, "", 400, "validation_failed", "data_id"},
		{"data: unknown data id", "GET", A + "/tasks/" + held.ID + "/data/" + unknown, admin, "", 404, "not_found", ""},

		// Task checkpoints: only the holder of a task in progress saves one,
		// a JSON value of at most 64 KiB compacted; no event otherwise.
		{"checkpoint: not the holder", "PUT", W + "/tasks/" + held.ID + "/checkpoint", duo, `{"state":{"session_id":"s"}}`, 403, "forbidden", ""},
		{"checkpoint: by an admin", "PUT", W + "/tasks/" + held.ID + "/checkpoint", admin, `{"state":{"session_id":"s"}}`, 403, "forbidden", ""},
		{"checkpoint: finished task", "PUT", W + "/tasks/" + doneTask.ID + "/checkpoint", una, `{"state":{"session_id":"s"}}`, 409, "invalid_transition", ""},
		{"checkpoint: pending task", "PUT", W + "/tasks/" + pending.ID + "/checkpoint", una, `{"state":{"session_id":"s"}}`, 403, "forbidden", ""},
		{"checkpoint: unknown task", "PUT", W + "/tasks/" + unknown + "/checkpoint", una, `{"state":{"session_id":"s"}}`, 404, "not_found", ""},
		{"checkpoint: over 64 KiB", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{"state":{"log":"` + strings.Repeat("x", events.MaxCheckpointBytes) + `"}}`, 413, "too_large", "state"},
		{"checkpoint: body over its bound", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{"state":"` + strings.Repeat("x", api.MaxCheckpointBodyBytes) + `"}`, 413, "too_large", "state"},
		{"checkpoint: not JSON", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{"state": session-42}`, 400, "validation_failed", "body"},
		{"checkpoint: null state", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{"state":null}`, 400, "validation_failed", "state"},
		{"checkpoint: no state", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{}`, 400, "validation_failed", "state"},
		{"checkpoint: unknown field", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{"state":1,"session":"s"}`, 400, "validation_failed", "session"},
		{"checkpoint: state nested too deep", "PUT", W + "/tasks/" + held.ID + "/checkpoint", una, `{"state":` + deep(D+1) + `}`, 400, "validation_failed", "state"},

		// Releasing a blocked task, and a task's assignment history.
		{"admin release: not blocked", "POST", A + "/tasks/" + pending.ID + "/release", admin, `{}`, 409, "invalid_transition", ""},
		{"admin release: bad id", "POST", A + "/tasks/not-a-uuid/release", admin, `{}`, 400, "validation_failed", "id"},
		{"admin release: unknown task", "POST", A + "/tasks/" + unknown + "/release", admin, `{}`, 404, "not_found", ""},
		{"admin release: by a worker", "POST", A + "/tasks/" + pending.ID + "/release", una, `{}`, 403, "forbidden", ""},
		{"assignments: bad id", "GET", A + "/tasks/not-a-uuid/assignments", admin, "", 400, "validation_failed", "id"},
		{"assignments: unknown task", "GET", A + "/tasks/" + unknown + "/assignments", admin, "", 404, "not_found", ""},

		// Workflows' list: its page size and cursor.
		{"workflows: limit 0", "GET", A + "/workflows?limit=0", admin, "", 400, "validation_failed", "limit"},
		{"workflows: limit over 200", "GET", A + "/workflows?limit=201", admin, "", 400, "validation_failed", "limit"},
		{"workflows: bad cursor", "GET", A + "/workflows?after=nope", admin, "", 400, "validation_failed", "after"},

		// Routing.
		{"unknown route", "GET", "/api/v1/nope", admin, "", 404, "not_found", ""},
		{"unknown sub-route", "POST", A + "/tasks/" + pending.ID + "/explode", admin, `{}`, 404, "not_found", ""},
		{"wrong method", "DELETE", A + "/tasks/" + pending.ID, admin, "", 405, "method_not_allowed", ""},
		{"wrong method on claim", "PATCH", W + "/tasks/claim", una, "", 405, "method_not_allowed", ""},
		{"wrong method on login", "GET", "/api/v1/auth/login", "", "", 405, "method_not_allowed", ""},
		// A static path asked with a method only a parameter route beside it
		// has: 405, never that route's "id: must be a UUID", and before
		// authentication.
		{"wrong method beside a parameter route", "PUT", A + "/task-types", admin, `{}`, 405, "method_not_allowed", ""},
		{"wrong method beside a parameter route, anonymous", "PUT", A + "/task-types", "", `{}`, 405, "method_not_allowed", ""},
		{"GET of the batch claim", "GET", W + "/tasks/claims", una, "", 405, "method_not_allowed", ""},
		{"GET of the claim with a query", "GET", W + "/tasks/claim?wait=0", una, "", 405, "method_not_allowed", ""},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.snapshot(t)
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req, err := http.NewRequestWithContext(ctx, c.method, b.url+c.path, body)
			require.NoError(t, err)
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			switch {
			case strings.HasPrefix(c.auth, "cookie:"): // the admin UI's session cookie
				req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: strings.TrimPrefix(c.auth, "cookie:")})
			case strings.HasPrefix(c.auth, "basic:"):
				parts := strings.Split(c.auth, ":")
				req.SetBasicAuth(parts[1], parts[2])
			case c.auth != "":
				req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(c.auth))
			}
			resp, err := b.http.Do(req)
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)

			require.Less(t, resp.StatusCode, 500, "never a 5xx: %s", raw)
			require.Equal(t, c.status, resp.StatusCode, "body: %.300s", raw)
			if c.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, resp.Header.Get("Allow"), "a 405 names the methods the path has")
			}
			var env struct {
				Success *bool          `json:"success"`
				Error   *api.ErrorBody `json:"error"`
			}
			require.NoError(t, json.Unmarshal(raw, &env), "not an envelope: %.300s", raw)
			require.NotNil(t, env.Success)
			require.False(t, *env.Success)
			require.NotNil(t, env.Error, "no error body: %.300s", raw)
			require.NotEmpty(t, env.Error.Code)
			require.NotEmpty(t, env.Error.Message)
			require.Equal(t, c.code, env.Error.Code, "message: %s", env.Error.Message)
			if c.field != "" {
				require.Equal(t, c.field, env.Error.Field, "message: %s", env.Error.Message)
			}
			require.Equal(t, before, b.snapshot(t), "the database changed")
		})
	}
}

// badInputSchedules makes a live schedule, a cancelled one and an archived
// type for the schedule cases.
func (b *bundle) badInputSchedules(t *testing.T, tt *events.TaskType) (live, gone *events.Schedule, archived *events.TaskType) {
	t.Helper()
	spec := client.NewSchedule{Task: events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "weekly report", Params: json.RawMessage(`{"days":7}`)},
		Cron: "0 6 * * 1", TimeZone: "Europe/Berlin"}
	live, err := b.admin.CreateSchedule(b.ctx, spec)
	require.NoError(t, err)
	gone, err = b.admin.CreateSchedule(b.ctx, spec)
	require.NoError(t, err)
	_, err = b.admin.ScheduleAction(b.ctx, gone.ID, "cancel", "")
	require.NoError(t, err)
	archived = b.newType(t, "old_report")
	_, err = b.db.UpdateTaskType(b.ctx, archived.ID, events.Meta{Actor: events.System("test")},
		func(tt *events.TaskType) ([]events.Payload, error) { return tt.Archive() })
	require.NoError(t, err)
	return live, gone, archived
}

func jwtDecode(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
func jwtEncode(b []byte) string          { return base64.RawURLEncoding.EncodeToString(b) }

// TestNestingAtTheBound: free-form JSON nested exactly MaxJSONDepth levels
// is stored as sent, wherever the request puts it.
func TestNestingAtTheBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "deep")
	w := b.newWorker(t, "Deep", 1)
	deep := strings.Repeat("[", api.MaxJSONDepth) + "1" + strings.Repeat("]", api.MaxJSONDepth)
	obj := strings.Repeat(`{"a":`, api.MaxJSONDepth-1) + "1" + strings.Repeat("}", api.MaxJSONDepth-1)
	params := json.RawMessage(`{"days":1,"x":` + obj + `}`)

	task, err := b.admin.CreateTask(ctx, client.NewTask{Title: "deep", TaskTypeID: tt.ID, Params: params})
	require.NoError(t, err)
	require.JSONEq(t, string(params), string(task.Params))
	_, err = w.Claim(ctx)
	require.NoError(t, err)
	require.NoError(t, w.Do(ctx, http.MethodPost, "/api/v1/worker/heartbeat", json.RawMessage(`{"metadata":{"m":`+obj+`}}`), nil))
	require.NoError(t, w.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/"+task.ID+"/result", json.RawMessage(`{"result":`+deep+`}`), nil))
	got, err := b.admin.Task(ctx, task.ID)
	require.NoError(t, err)
	require.JSONEq(t, deep, string(got.Result))
	_, err = b.admin.CreateSchedule(ctx, client.NewSchedule{Task: events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "deep", Params: params}, Cron: "@daily"})
	require.NoError(t, err, "task.params may be as deep as a task's params")
}
