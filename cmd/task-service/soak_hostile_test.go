package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clawdbot/task-service/api/client"
)

// The hostile inputs of issue 20, sent on a loop to the soak's instances
// while the load and the faults go on. Each expects its refusal (or, for
// uploads, its safe answer); an instance that does not answer, or answers
// 503 while the database restarts, is counted apart. Anything else is
// unexpected and fails the soak.

// hostile is the loop's state: a worker holding a task of its own type (for
// the upload inputs), and a tally per input.
type hostile struct {
	s      *soak
	worker []*client.Client // one per instance, same token
	typeID string
	taskID string
	hc     *http.Client

	unexpected atomic.Int64
	mu         sync.Mutex
	tally      map[string]*hostileTally
	slow       sync.WaitGroup
	slowSlots  chan struct{}
}

type hostileTally struct{ ok, unavailable, unexpected int }

// verdict is one input's outcome: ok, unavailable (no answer or 503), or
// the unexpected answer.
type verdict struct {
	unavailable bool
	wrong       string
}

var (
	asExpected  = verdict{}
	unavailable = verdict{unavailable: true}
)

func wrong(format string, args ...any) verdict { return verdict{wrong: fmt.Sprintf(format, args...)} }

func newHostile(s *soak) *hostile {
	ctx := context.Background()
	h := &hostile{s: s, tally: map[string]*hostileTally{}, slowSlots: make(chan struct{}, 12),
		hc: &http.Client{Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	admin := s.admin[0]
	none := 0
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "hostile", MaxRetries: &none})
	must(s, err)
	h.typeID = tt.ID
	u, err := admin.CreateWorker(ctx, client.NewWorker{Email: "mallory@soak.example.com", Password: "worker-password", FullName: "Mallory", MaxConcurrentTasks: 1})
	must(s, err)
	login := client.New(s.ins[0].base, s.hc)
	_, err = login.Login(ctx, "mallory@soak.example.com", "worker-password")
	must(s, err)
	for _, in := range s.ins {
		c := client.New(in.base, s.hc)
		c.SetToken(login.Token())
		h.worker = append(h.worker, c)
	}
	task, err := admin.CreateTask(ctx, client.NewTask{Title: "held by Mallory", TaskTypeID: tt.ID, AssignedTo: u.ID})
	must(s, err)
	got, err := login.Claim(ctx)
	must(s, err)
	if got == nil || got.ID != task.ID {
		s.t.Fatalf("the hostile worker did not claim its own task")
	}
	h.taskID = task.ID
	return h
}

func must(s *soak, err error) {
	if err != nil {
		s.t.Fatal(err)
	}
}

// inputs are the hostile inputs, each with the item it attacks.
func (h *hostile) inputs() []struct {
	name string
	slow bool
	send func(i int, base string) verdict
} {
	return []struct {
		name string
		slow bool
		send func(i int, base string) verdict
	}{
		{"1: a multipart login trickled a byte at a time", true, h.slowMultipartLogin},
		{"1: a 40 MiB multipart login", true, h.largeMultipartLogin},
		{"1: a multipart UI form with a forged session", false, h.multipartUIForm},
		{"5: an invented method on a random path", false, h.inventedMethod},
		{"6, 8: a login with a hostile next and a forged X-Forwarded-Proto", false, h.hostileNext},
		{"11: stream-token bodies: malformed, unknown field, text/plain, 2 MiB", false, h.streamTokenBodies},
		{"2: a schedule starting in year 0026", false, h.scheduleYear26},
		{"7: a schedule @every 1s", false, h.everySecond},
		{"3: task params nested 9,000 deep", false, h.nestedParams},
		{"3: heartbeat metadata nested 8,000 deep", false, h.nestedHeartbeat},
		{"9: 3,000 zero-byte files in one upload", false, h.manyFiles},
		{"10: an upload sent as JavaScript, downloaded by an admin", false, h.scriptUpload},
		{"11: a lone surrogate in a task title", false, h.loneSurrogate},
	}
}

// run sends one input every half second, in turn, to the instances in
// turn, until ctx ends; then it waits for the slow ones.
func (h *hostile) run(ctx context.Context) {
	inputs := h.inputs()
	lastBeat := time.Now()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			h.slow.Wait()
			return
		case <-time.After(500 * time.Millisecond):
		}
		if time.Since(lastBeat) > 10*time.Second { // Mallory stays online, holding her task
			_ = h.s.call(h.worker, i, func(c *client.Client) error {
				return c.Heartbeat(context.Background(), client.Heartbeat{Status: "working"})
			})
			lastBeat = time.Now()
		}
		in := inputs[i%len(inputs)]
		base := h.s.ins[(i/len(inputs))%len(h.s.ins)].base
		if !in.slow {
			h.record(in.name, in.send(i, base))
			continue
		}
		select {
		case h.slowSlots <- struct{}{}:
		default:
			continue // enough slow ones open already
		}
		h.slow.Go(func() {
			defer func() { <-h.slowSlots }()
			h.record(in.name, in.send(i, base))
		})
	}
}

func (h *hostile) record(name string, v verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tally[name]
	if t == nil {
		t = &hostileTally{}
		h.tally[name] = t
	}
	switch {
	case v.unavailable:
		t.unavailable++
	case v.wrong != "":
		t.unexpected++
		h.unexpected.Add(1)
		h.s.problem("hostile input %q: %s", name, v.wrong)
	default:
		t.ok++
	}
}

func (h *hostile) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var total hostileTally
	var lines []string
	for name, t := range h.tally {
		total.ok += t.ok
		total.unavailable += t.unavailable
		total.unexpected += t.unexpected
		lines = append(lines, fmt.Sprintf("           %-72s %4d as expected, %3d during faults, %d unexpected", name, t.ok, t.unavailable, t.unexpected))
	}
	slices.Sort(lines)
	return fmt.Sprintf("%d inputs: %d refused or answered as expected, %d during faults (no answer or 503), %d unexpected\n%s",
		total.ok+total.unavailable+total.unexpected, total.ok, total.unavailable, total.unexpected, strings.Join(lines, "\n"))
}

// checks: the refused inputs changed nothing.
func (h *hostile) checks() []check {
	ctx := context.Background()
	var schedules, hostileTasks int
	_ = h.s.pool.QueryRow(ctx, `SELECT count(*) FROM schedules`).Scan(&schedules)
	_ = h.s.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE task_type_id = $1`, h.typeID).Scan(&hostileTasks)
	return []check{
		{fmt.Sprintf("schedules made by hostile inputs: %d (want 0)", schedules), schedules == 0},
		{fmt.Sprintf("tasks of the hostile type: %d (want 1, the one Mallory holds)", hostileTasks), hostileTasks == 1},
	}
}

// send is one plain request; an error without an answer or a 503 is
// unavailable.
func (h *hostile) send(method, u string, body io.Reader, header ...string) (*http.Response, string, *verdict) {
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		v := wrong("%v", err)
		return nil, "", &v
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, "", &unavailable
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return nil, "", &unavailable
	}
	return resp, string(raw), nil
}

// expect checks an answer's status.
func expect(resp *http.Response, body string, v *verdict, statuses ...int) verdict {
	if v != nil {
		return *v
	}
	if !slices.Contains(statuses, resp.StatusCode) {
		return wrong("answered %d, want %v: %s", resp.StatusCode, statuses, cutLine(body, 120))
	}
	return asExpected
}

const hostileBoundary = "soakboundary"

var hostilePartHead = "--" + hostileBoundary + "\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nroot@example.com\r\n" +
	"--" + hostileBoundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"

// multipartLogin sends a chunked multipart login, trickled or 40 MiB at
// once, and expects a 415 and the connection closed within the body
// timeout (30 s) and a margin.
func (h *hostile) multipartLogin(base string, trickle bool) verdict {
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		return unavailable
	}
	defer conn.Close()
	start := time.Now()
	if _, err := fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: %s\r\nOrigin: %s\r\nCookie: task_session=forged\r\nContent-Type: multipart/form-data; boundary=%s\r\nTransfer-Encoding: chunked\r\n\r\n",
		host, base, hostileBoundary); err != nil {
		return unavailable
	}
	go sendBody(conn, []byte(hostilePartHead), true, trickle)
	_ = conn.SetReadDeadline(time.Now().Add(50 * time.Second))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return wrong("no answer in 50 s")
		}
		return unavailable // killed meanwhile
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		return unavailable
	}
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		return wrong("answered %d, want 415", resp.StatusCode)
	}
	_, _ = io.Copy(io.Discard, r)
	if took := time.Since(start); took > 45*time.Second {
		return wrong("the connection stayed open %v", took.Round(time.Second))
	}
	return asExpected
}

func (h *hostile) slowMultipartLogin(_ int, base string) verdict { return h.multipartLogin(base, true) }
func (h *hostile) largeMultipartLogin(_ int, base string) verdict {
	return h.multipartLogin(base, false)
}

var forgedSessionForm = func() (body []byte, contentType string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("title", "spooled")
	f, _ := w.CreateFormFile("file", "big.bin")
	_, _ = f.Write(bytes.Repeat([]byte("x"), 1<<20))
	_ = w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

func (h *hostile) multipartUIForm(_ int, base string) verdict {
	body, ct := forgedSessionForm()
	resp, raw, v := h.send(http.MethodPost, base+"/tasks/new", bytes.NewReader(body), "Origin", base, "Content-Type", ct, "Cookie", "task_session=forged")
	return expect(resp, raw, v, http.StatusUnsupportedMediaType)
}

func (h *hostile) inventedMethod(i int, base string) verdict {
	resp, raw, v := h.send(fmt.Sprintf("BREW%d", i), fmt.Sprintf("%s/%x/%d", base, time.Now().UnixNano(), i), nil)
	return expect(resp, raw, v, http.StatusNotFound, http.StatusMethodNotAllowed)
}

var hostileNexts = []string{"/\t/evil.example", "//evil.example", "/\\evil.example", "https://evil.example/", "/%2F/evil.example",
	"/\n/evil.example", "javascript:alert(1)", "/tasks//evil.example", "/\u3000/evil.example", "%2F%2Fevil.example"}

func (h *hostile) hostileNext(i int, base string) verdict {
	form := url.Values{"email": {"root@example.com"}, "password": {"root-password"}, "next": {hostileNexts[i%len(hostileNexts)]}}
	resp, raw, v := h.send(http.MethodPost, base+"/login", strings.NewReader(form.Encode()), "Origin", base,
		"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-Proto", "https")
	if ok := expect(resp, raw, v, http.StatusSeeOther); ok != asExpected {
		return ok
	}
	if loc := resp.Header.Get("Location"); loc != "/" {
		return wrong("next=%q answered Location %q", form.Get("next"), loc)
	}
	if secureFlag(resp.Header.Get("Set-Cookie")) || resp.Header.Get("Strict-Transport-Security") != "" {
		return wrong("a forged X-Forwarded-Proto from an untrusted peer made the answer secure")
	}
	return asExpected
}

func (h *hostile) streamTokenBodies(_ int, base string) verdict {
	auth := "Bearer " + h.s.admin[0].Token()
	for _, c := range []struct {
		contentType, body string
		status            int
	}{
		{"application/json", `{"x":`, 400},
		{"application/json", `{"ttl":60}`, 400},
		{"text/plain", `{}`, 415},
		{"application/json", `{"pad":"` + strings.Repeat("a", 2<<20) + `"}`, 413},
	} {
		resp, raw, v := h.send(http.MethodPost, base+"/api/v1/admin/events/stream-token", strings.NewReader(c.body),
			"Authorization", auth, "Content-Type", c.contentType)
		if got := expect(resp, raw, v, c.status); got != asExpected {
			return got
		}
	}
	return asExpected
}

func (h *hostile) adminJSON(base, path, body string) (*http.Response, string, *verdict) {
	return h.send(http.MethodPost, base+path, strings.NewReader(body), "Authorization", "Bearer "+h.s.admin[0].Token(),
		"Content-Type", "application/json")
}

func (h *hostile) scheduleYear26(_ int, base string) verdict {
	resp, raw, v := h.adminJSON(base, "/api/v1/admin/schedules", `{"name":"typo","task":{"task_type_id":"`+h.typeID+
		`","title":"every 2 minutes"},"interval":{"every":2,"unit":"minutes"},"start_at":"0026-01-01T00:00:00Z"}`)
	return expect(resp, raw, v, http.StatusBadRequest)
}

func (h *hostile) everySecond(_ int, base string) verdict {
	resp, raw, v := h.adminJSON(base, "/api/v1/admin/schedules", `{"name":"too often","task":{"task_type_id":"`+h.typeID+
		`","title":"every second"},"cron":"@every 1s"}`)
	return expect(resp, raw, v, http.StatusBadRequest)
}

func nested(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }

func (h *hostile) nestedParams(_ int, base string) verdict {
	resp, raw, v := h.adminJSON(base, "/api/v1/admin/workers/tasks", `{"title":"deep","task_type_id":"`+h.typeID+
		`","params":{"a":`+nested(9000)+`}}`)
	return expect(resp, raw, v, http.StatusBadRequest)
}

func (h *hostile) nestedHeartbeat(i int, base string) verdict {
	resp, raw, v := h.send(http.MethodPost, base+"/api/v1/worker/heartbeat", strings.NewReader(`{"status":"working","metadata":{"a":`+nested(8000)+`}}`),
		"Authorization", "Bearer "+h.worker[0].Token(), "Content-Type", "application/json")
	return expect(resp, raw, v, http.StatusBadRequest)
}

var zeroByteFiles = func() (body []byte, contentType string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.WriteField("data_type", "empty")
	for i := range 3000 {
		_, _ = w.CreateFormFile("file", fmt.Sprintf("f%d.bin", i))
	}
	_ = w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

func (h *hostile) manyFiles(_ int, base string) verdict {
	body, ct := zeroByteFiles()
	resp, raw, v := h.send(http.MethodPost, base+"/api/v1/worker/tasks/"+h.taskID+"/data", bytes.NewReader(body),
		"Authorization", "Bearer "+h.worker[0].Token(), "Content-Type", ct)
	return expect(resp, raw, v, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
}

func (h *hostile) scriptUpload(_ int, base string) verdict {
	resp, raw, v := h.send(http.MethodPost, base+"/api/v1/worker/tasks/"+h.taskID+"/data?data_type=web&filename=x.js",
		strings.NewReader("alert(document.cookie)"), "Authorization", "Bearer "+h.worker[0].Token(), "Content-Type", "application/javascript")
	if got := expect(resp, raw, v, http.StatusCreated); got != asExpected {
		return got
	}
	var dataID string
	if i := strings.Index(raw, `"id":"`); i >= 0 {
		dataID = raw[i+6 : i+6+36]
	}
	resp, raw, v = h.send(http.MethodGet, base+client.AdminDataPath(h.taskID, dataID), nil, "Authorization", "Bearer "+h.s.admin[0].Token())
	if got := expect(resp, raw, v, http.StatusOK); got != asExpected {
		return got
	}
	ct := strings.ToLower(resp.Header.Get("Content-Type"))
	if !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
		strings.Contains(ct, "javascript") || strings.Contains(ct, "html") {
		return wrong("served as %q, disposition %q, nosniff %q", ct, resp.Header.Get("Content-Disposition"), resp.Header.Get("X-Content-Type-Options"))
	}
	return asExpected
}

func (h *hostile) loneSurrogate(_ int, base string) verdict {
	resp, raw, v := h.adminJSON(base, "/api/v1/admin/workers/tasks", `{"title":"half \ud800 a pair","task_type_id":"`+h.typeID+`"}`)
	return expect(resp, raw, v, http.StatusBadRequest)
}

// cutLine is s on one line, at most n bytes.
func cutLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
