package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The admin UI in a real headless Chromium (Debian's chromium; `make test`
// and .ci/run install it through scripts/chromium.sh).

// chromiumPath finds the browser: $CHROMIUM, else chromium on PATH.
func chromiumPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: run scripts/chromium.sh (apt-get install chromium) or set CHROMIUM to a Chrome binary")
	return ""
}

// browser is one headless Chromium tab with what its console said.
type browser struct {
	t   testing.TB
	ctx context.Context
	mu  sync.Mutex
	// problems are console errors, uncaught exceptions and failed loads;
	// allow lists the substrings a test expects among them.
	problems []string
	allow    []string
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	// A fresh profile and no background traffic: the machine's network is
	// closed and Chromium would otherwise keep trying to reach Google.
	// The profile is not a t.TempDir: Chromium's helper processes may still
	// write to it for a moment after the browser exits, which would fail the
	// test in TempDir's cleanup. It is removed on a best-effort basis.
	profile, err := os.MkdirTemp("", "task-service-chromium-")
	require.NoError(t, err)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(profile),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		for i := 0; i < 10 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	b := &browser{t: t, ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.problem("exception: " + e.ExceptionDetails.Error())
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.problem("console.error: " + strings.Join(parts, " "))
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.LevelError {
				b.problem(fmt.Sprintf("log %s: %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	require.NoError(t, chromedp.Run(ctx, log.Enable(), runtime.Enable()), "start chromium")
	return b
}

func (b *browser) problem(p string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, p)
}

// expect allows console errors containing s from now on.
func (b *browser) expect(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allow = append(b.allow, s)
}

// checkConsole fails on any console error that was not expected.
func (b *browser) checkConsole() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var bad []string
	for _, p := range b.problems {
		ok := false
		for _, a := range b.allow {
			ok = ok || strings.Contains(p, a)
		}
		if !ok {
			bad = append(bad, p)
		}
	}
	require.Empty(b.t, bad, "console errors")
}

// run runs actions with a deadline generous enough for a loaded machine.
func (b *browser) run(actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Run(ctx, actions...))
}

// waitJS waits (45 s at most: the machine may be loaded) until expr is true in a page that has finished
// loading, across navigations (an evaluation that a navigation interrupts is simply tried again). Waiting
// for the load lets chromedp see the new document before the next query: a query that races a navigation
// fails with "No node with given id found".
func (b *browser) waitJS(expr string) {
	b.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		var ok bool
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		last = chromedp.Run(ctx, chromedp.Evaluate(`document.readyState === "complete" && !!(`+expr+")", &ok))
		cancel()
		if last == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var loc, body string
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	_ = chromedp.Run(ctx, chromedp.Location(&loc), chromedp.Text("body", &body, chromedp.ByQuery))
	b.mu.Lock()
	problems := strings.Join(b.problems, "\n")
	b.mu.Unlock()
	b.t.Fatalf("still not true after 45 s: %s (last error: %v)\nconsole:\n%s\nat %s:\n%s", expr, last, problems, loc, body)
}

// click clicks the element sel. On a live page htmx may replace the node
// between chromedp finding it and pressing it ("Could not find node with
// given id"): no press happened then, so it finds the new node and tries again.
func (b *browser) click(sel string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		err := chromedp.Run(ctx, chromedp.Click(sel, chromedp.ByQuery))
		cancel()
		if err == nil || !strings.Contains(err.Error(), "Could not find node") || time.Now().After(deadline) {
			require.NoError(b.t, err, "click %s", sel)
			return
		}
	}
}

func (b *browser) location() string {
	b.t.Helper()
	var loc string
	b.run(chromedp.Location(&loc))
	return loc
}

// text is the element's visible text, read in one evaluation: live regions
// are swapped by htmx at any moment, and chromedp.Text's query-then-read can
// land on a node that was just replaced ("No node with given id found").
func (b *browser) text(sel string) string {
	b.t.Helper()
	q := "document.querySelector(" + strconv.Quote(sel) + ")"
	b.waitJS(q)
	var s string
	b.run(chromedp.Evaluate("("+q+" || {innerText: ''}).innerText.trim()", &s))
	return s
}

// login logs in through the form, coming from a logged-out visit to path.
func (b *browser) login(base, path string) {
	b.t.Helper()
	b.run(chromedp.Navigate(base+path), chromedp.WaitVisible("#email", chromedp.ByID))
	require.Contains(b.t, b.location(), "/login?next=", "a logged-out visit goes to the login page")
	b.run(chromedp.SendKeys("#email", "root@example.com", chromedp.ByID),
		chromedp.SendKeys("#password", "root-password", chromedp.ByID),
		chromedp.Submit("#password", chromedp.ByID))
	b.waitJS(fmt.Sprintf(`location.pathname + location.search === %q`, path))
}

func TestBrowserAdminUI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL)
	b := newBrowser(t)
	admin := s.rootAdmin(t)

	// Logged out: to the login page and back where we were going.
	b.login(s.base, "/types/new")

	// A type through the form; a schema that is not one is refused at its field.
	// (Chromium logs every 4xx page as a failed load: the refusals this test
	// provokes are expected, no others.)
	b.expect("status of 400 (Bad Request) " + s.base + "/types/new")
	b.expect("status of 400 (Bad Request) " + s.base + "/tasks/new")
	b.expect("status of 400 (Bad Request) " + s.base + "/tasks/")
	b.expect("status of 409 (Conflict) " + s.base + "/tasks/")
	b.run(chromedp.SetValue("#f-name", "crawl", chromedp.ByID),
		chromedp.SetValue("#f-param_schema", `{"type": 12}`, chromedp.ByID),
		chromedp.Submit("#f-name", chromedp.ByID),
		chromedp.WaitVisible(`#f-param_schema[aria-invalid="true"]`, chromedp.ByQuery))
	require.Contains(t, b.text("#type-form"), "param_schema")
	b.run(chromedp.SetValue("#f-label", "Crawl", chromedp.ByID),
		chromedp.SetValue("#f-param_schema", `{"type":"object","properties":{"days":{"type":"integer","minimum":1},"ticker":{"type":"string"}},"required":["days","ticker"]}`, chromedp.ByID),
		chromedp.SetValue("#f-max_retries", "2", chromedp.ByID),
		chromedp.Submit("#f-name", chromedp.ByID))
	b.waitJS(`/^\/types\/[0-9a-f-]{36}$/.test(location.pathname)`)
	typeID := strings.TrimPrefix(b.location(), s.base+"/types/")

	// A task through the form built from the schema: a violation shows at its field.
	b.run(chromedp.Navigate(s.base+"/tasks/new?type="+typeID), chromedp.WaitVisible("#f-params-days", chromedp.ByID),
		chromedp.SetValue("#title", "Crawl NVDA", chromedp.ByID),
		chromedp.SetValue("#f-params-days", "0", chromedp.ByID),
		chromedp.SetValue("#f-params-ticker", "NVDA", chromedp.ByID),
		chromedp.Submit("#title", chromedp.ByID),
		chromedp.WaitVisible(`#f-params-days[aria-invalid="true"]`, chromedp.ByQuery))
	fieldError := b.text(`#f-params-days ~ .field-error`)
	require.Contains(t, fieldError, "minimum")
	b.run(chromedp.SetValue("#f-params-days", "30", chromedp.ByID), chromedp.Submit("#title", chromedp.ByID))
	b.waitJS(`/^\/tasks\/[0-9a-f-]{36}$/.test(location.pathname)`)
	taskID := strings.TrimPrefix(b.location(), s.base+"/tasks/")
	require.Equal(t, "pending", b.text("#task-status"))

	// A worker claims and fails it through the API; the open page shows the
	// failure, then the retry in the chain, without a reload.
	b.run(chromedp.Evaluate(`window.notReloaded = true`, nil))
	wu, err := admin.CreateWorker(ctx, client.NewWorker{Email: "genesis@example.com", Password: "worker-password", FullName: "Genesis", MaxConcurrentTasks: 2})
	require.NoError(t, err)
	w := client.New(s.base, checkedHTTP(t, s.base, nil))
	_, err = w.Login(ctx, "genesis@example.com", "worker-password")
	require.NoError(t, err)
	claimed, err := w.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, taskID, claimed.ID)
	b.waitJS(`document.getElementById("task-status").textContent === "in_progress"`)
	_, err = w.UploadData(ctx, taskID, "posts", "nvda.jsonl", "", strings.NewReader("{\"id\":1}\n"), -1)
	require.NoError(t, err)
	_, err = w.Fail(ctx, taskID, "Arctic Shift answered 429")
	require.NoError(t, err)
	b.waitJS(`document.getElementById("task-status").textContent === "failed"`)
	b.waitJS(`document.querySelectorAll("#chain li").length === 2`)
	require.Contains(t, b.text("#chain"), "Arctic Shift answered 429")
	var still bool
	b.run(chromedp.Evaluate(`window.notReloaded === true`, &still))
	require.True(t, still, "the page updated in place")

	// The task's data (issue 14): listed on the page, and the link downloads
	// it with the session cookie.
	b.run(chromedp.Navigate(s.base + "/tasks/" + taskID))
	b.waitJS(`document.querySelector("#task-data-files a") !== null`)
	require.Contains(t, b.text("#task-data-files"), "nvda.jsonl")
	var downloaded string
	b.run(chromedp.Evaluate(`fetch(document.querySelector("#task-data-files a").href).then(r => r.text())`,
		&downloaded, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	require.Equal(t, "{\"id\":1}\n", downloaded)

	// The retry: assign with a validation error, then to the worker; cancel
	// refused (already cancelled elsewhere) with the error shown.
	// Follow the link by its address: the live refresh may replace the
	// chain between a click's query and the click (chromedp then loses the
	// node it found).
	b.waitJS(`document.querySelector("#chain li:nth-child(2) a") !== null`)
	var retryHref string
	b.run(chromedp.Evaluate(`document.querySelector("#chain li:nth-child(2) a").href`, &retryHref))
	b.run(chromedp.Navigate(retryHref))
	b.waitJS(`document.getElementById("task-status") && document.getElementById("task-status").textContent === "pending" && !location.pathname.endsWith(` + fmt.Sprintf("%q", taskID) + `)`)
	retryID := strings.TrimPrefix(b.location(), s.base+"/tasks/")
	b.run(chromedp.Click(`#actions details:nth-of-type(2) summary`, chromedp.ByQuery),
		chromedp.Click(`#actions form[action$="/assign"] button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#assign-worker[aria-invalid="true"]`, chromedp.ByQuery))
	b.run(chromedp.SetValue("#assign-worker", wu.ID, chromedp.ByID),
		chromedp.SetValue("#assign-reason", "knows the site", chromedp.ByID),
		chromedp.Click(`#actions form[action$="/assign"] button`, chromedp.ByQuery))
	b.waitJS(`document.body.textContent.includes("knows the site")`)
	b.run(chromedp.Click(`#actions details summary`, chromedp.ByQuery),
		chromedp.SetValue("#cancel-reason", "not needed", chromedp.ByID))
	_, err = admin.CancelTask(ctx, retryID, "cancelled from the API first")
	require.NoError(t, err)
	b.run(chromedp.Click(`#actions form[action$="/cancel"] button`, chromedp.ByQuery))
	b.waitJS(`document.querySelector("#actions .form-error") !== null`)
	require.Contains(t, b.text("#actions .form-error"), "cancelled")

	// A state change without the CSRF token is refused, and changes nothing.
	var status int
	b.run(chromedp.Evaluate(`fetch("/tasks/bulk", {method: "POST", body: new URLSearchParams({id: "`+taskID+`", action: "retry"})}).then(r => r.status)`,
		&status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	require.Equal(t, 403, status)
	b.expect("/tasks/bulk") // the refused fetch is logged as a failed load

	// The dashboard updates live.
	b.run(chromedp.Navigate(s.base + "/"))
	b.waitJS(`document.querySelector(".card .n") !== null`)
	queue := b.text(".card .n")
	_, err = admin.CreateTask(ctx, client.NewTask{Title: "Crawl AMD", TaskTypeID: typeID, Params: json.RawMessage(`{"days":1,"ticker":"AMD"}`)})
	require.NoError(t, err)
	b.waitJS(fmt.Sprintf(`document.querySelector(".card .n").textContent !== %q`, queue))

	// The live events page keeps every event, once, across a server restart.
	b.run(chromedp.Navigate(s.base+"/events"), chromedp.WaitVisible("#tail", chromedp.ByID))
	b.waitJS(`document.getElementById("tail-status").textContent === "live"`)
	first := tailPositions(b)
	mk := func(title string) {
		_, err := admin.CreateTask(ctx, client.NewTask{Title: title, TaskTypeID: typeID, Params: json.RawMessage(`{"days":1,"ticker":"X"}`)})
		require.NoError(t, err)
	}
	mk("before restart")
	b.waitJS(`document.body.textContent.includes("before restart")`)

	addr := strings.TrimPrefix(s.base, "http://")
	b.expect("/api/v1/admin/events/stream") // refused connections while it is down
	b.expect("/session")                    // and the session probe after each stream error
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("task-service did not stop")
	}
	s = startServer(t, dbURL, "LISTEN_ADDR="+addr)
	mk("right after restart") // before the page reconnects: caught up by Last-Event-ID
	b.waitJS(`document.body.textContent.includes("right after restart")`)
	mk("later")
	b.waitJS(`document.body.textContent.includes("later")`)

	// Every event after the page's first one is in the table exactly once.
	want, err := admin.Events(ctx, client.EventQuery{After: first[0], Limit: 1000})
	require.NoError(t, err)
	got := tailPositions(b)
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
	}
	for _, e := range want.Events {
		require.Equal(t, 1, seen[e.Position], "event %s %s shown %d times", e.Type, e.Position, seen[e.Position])
	}
	for p, n := range seen {
		require.Equal(t, 1, n, "position %s repeated", p)
	}

	// Every control on every page has an accessible name.
	for _, path := range []string{"/", "/tasks", "/tasks/" + taskID, "/tasks/" + retryID, "/tasks/new?type=" + typeID,
		"/types", "/types/" + typeID, "/types/new", "/workers", "/events", "/schedules", "/schedules/new"} {
		var unnamed []string
		b.run(chromedp.Navigate(s.base+path), chromedp.WaitReady("main", chromedp.ByQuery),
			chromedp.Evaluate(unnamedControls, &unnamed))
		require.Empty(t, unnamed, "controls without an accessible name on %s", path)
	}

	b.checkConsole()
}

// unnamedControls lists the page's controls that have no accessible name
// (a label, aria-label, aria-labelledby, title, or their own text).
const unnamedControls = `Array.from(document.querySelectorAll("input:not([type=hidden]), select, textarea, button, a[href], summary"))
  .filter((el) => {
    const labels = el.labels ? Array.from(el.labels).map((l) => l.textContent).join("").trim() : "";
    const by = el.getAttribute("aria-labelledby");
    const named = labels || (el.getAttribute("aria-label") || "").trim() || (el.getAttribute("title") || "").trim() ||
      (by && document.getElementById(by) && document.getElementById(by).textContent.trim()) ||
      (/^(BUTTON|A|SUMMARY)$/.test(el.tagName) && el.textContent.trim());
    return !named;
  })
  .map((el) => el.outerHTML.slice(0, 160))`

// tailPositions lists the live events table's positions, newest first.
func tailPositions(b *browser) []string {
	b.t.Helper()
	var ps []string
	b.run(chromedp.Evaluate(`Array.from(document.querySelectorAll("#tail tbody tr[data-position]")).map(r => r.dataset.position)`, &ps))
	return ps
}
