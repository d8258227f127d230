package main_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// The schedule pages are live in a real headless Chromium, like every other
// page: a schedule firing every two seconds (a test-only minimum interval)
// moves the list and the schedule's page without a reload. The header says
// "live", and "connection lost" while the server is down, then live again
// when it is back. A page whose login is gone when its stream drops goes to
// the login page.
func TestBrowserLivePages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	env := []string{"TASK_SERVICE_TEST_MIN_SCHEDULE_INTERVAL=1s", "SCHEDULER_CATCH_UP=1s"}
	s := startServer(t, dbURL, env...)
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "tick", Label: "Tick"})
	require.NoError(t, err)
	sc, err := admin.CreateSchedule(ctx, client.NewSchedule{Name: "tick", Task: events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "Tick"},
		Interval: &events.Interval{Every: 2, Unit: events.UnitSeconds}, Overlap: events.OverlapAllow})
	require.NoError(t, err)

	b := newBrowser(t)
	b.login(s.base, "/schedules")
	b.run(chromedp.Evaluate(`window.notReloaded = true`, nil))
	runs := fmt.Sprintf(`document.querySelector('#schedules tr[data-id=%q] td:nth-child(6)')`, sc.ID)
	for range 2 {
		before := b.text(fmt.Sprintf(`#schedules tr[data-id=%q] td:nth-child(6)`, sc.ID))
		b.waitJS(fmt.Sprintf(`%s && %s.textContent.trim() !== %q`, runs, runs, before))
	}
	requireNotReloaded(b)

	// The schedule's page: its newest execution moves on.
	b.run(chromedp.Navigate(s.base+"/schedules/"+sc.ID), chromedp.WaitVisible("#executions", chromedp.ByID))
	b.run(chromedp.Evaluate(`window.notReloaded = true`, nil))
	newest := `document.querySelector("#executions tbody tr td")`
	waitNewerRun := func() {
		t.Helper()
		before := b.text("#executions tbody tr td")
		b.waitJS(fmt.Sprintf(`%s && %s.textContent.trim().startsWith("#") && %s.textContent.trim() !== %q`, newest, newest, newest, before))
	}
	waitNewerRun()
	waitNewerRun()
	requireNotReloaded(b)
	b.waitJS(`document.getElementById("conn").dataset.state === "live"`)
	require.Equal(t, "live", b.text("#conn"))

	// The server goes down: the page says so, and stays saying so.
	b.expect("/api/v1/admin/events/stream") // refused while it is down
	b.expect("/session")                    // the session probe, refused too
	b.expect(s.base + "/schedules/")        // a refresh that was under way,
	b.expect("htmx:sendError")              // as htmx reports it
	b.expect("htmx:afterRequest")
	addr := strings.TrimPrefix(s.base, "http://")
	kill := func(sig syscall.Signal) {
		t.Helper()
		require.NoError(t, s.cmd.Process.Signal(sig))
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Fatal("task-service did not stop")
		}
	}
	kill(syscall.SIGKILL)
	b.waitJS(`document.getElementById("conn").dataset.state === "lost" && !document.getElementById("conn").hidden`)
	require.Contains(t, b.text("#conn"), "connection lost")
	time.Sleep(3 * time.Second) // several reconnection attempts
	require.Contains(t, b.text("#conn"), "connection lost", "no attempt while the server is down looks live")

	// Back: live again, and the page updates again.
	s = startServer(t, dbURL, append([]string{"LISTEN_ADDR=" + addr}, env...)...)
	b.waitJS(`document.getElementById("conn").dataset.state === "live"`)
	waitNewerRun()
	requireNotReloaded(b)

	// The login is gone (here: the cookie) when the stream drops: the page
	// goes to the login page and says why.
	b.run(network.ClearBrowserCookies())
	kill(syscall.SIGTERM)
	s = startServer(t, dbURL, append([]string{"LISTEN_ADDR=" + addr}, env...)...)
	b.waitJS(`location.pathname === "/login" && new URLSearchParams(location.search).get("expired") === "1"`)
	require.Equal(t, "/schedules/"+sc.ID, b.evalString(`new URLSearchParams(location.search).get("next")`))
	b.checkConsole()
}

func requireNotReloaded(b *browser) {
	b.t.Helper()
	var still bool
	b.run(chromedp.Evaluate(`window.notReloaded === true`, &still))
	require.True(b.t, still, "the page updated in place")
}

// evalString evaluates a JavaScript expression whose value is a string.
func (b *browser) evalString(expr string) string {
	b.t.Helper()
	var out string
	b.run(chromedp.Evaluate(expr, &out))
	return out
}

// A click is a press and a release on one element. A live region that an
// event replaces between the two would swallow the click (the release lands
// on the new button), so a region is not replaced while a pointer is down
// inside it: here the schedule is renamed while Pause is pressed, and the
// release still pauses it.
func TestBrowserClickSurvivesALiveRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "digest", Label: "Digest"})
	require.NoError(t, err)
	sc, err := admin.CreateSchedule(ctx, client.NewSchedule{Name: "Morning digest", Task: events.ScheduleTemplate{TaskTypeID: tt.ID, Title: "Digest"},
		Interval: &events.Interval{Every: 1, Unit: events.UnitHours}})
	require.NoError(t, err)

	b := newBrowser(t)
	// Count htmx answers from each page's first script on: installed after
	// the page loaded, the counter could miss the stream's opening refresh.
	b.run(chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(`window.answers = 0; document.addEventListener("htmx:afterRequest", () => window.answers++);`).Do(ctx)
		return err
	}))
	b.login(s.base, "/schedules/"+sc.ID)
	// The stream's opening refresh has come and gone.
	b.waitJS(`document.getElementById("conn").dataset.state === "live" && window.answers >= 1 && !document.querySelector(".htmx-request")`)

	// Hold the live region's next refresh (htmx sends HX-Request) until
	// the pointer is down, so its answer comes between press and release.
	held := make(chan fetch.RequestID, 1)
	chromedp.ListenTarget(b.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			if _, refresh := e.Request.Headers["HX-Request"]; refresh {
				held <- e.RequestID
				return
			}
			go func() { _ = chromedp.Run(b.ctx, fetch.ContinueRequest(e.RequestID)) }()
		}
	})
	b.run(fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/schedules/*"}}))
	_, err = admin.UpdateSchedule(ctx, sc.ID, map[string]any{"name": "Renamed digest"})
	require.NoError(t, err)
	var id fetch.RequestID
	select {
	case id = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the rename caused no refresh")
	}

	var x, y float64
	b.run(chromedp.Evaluate(`document.querySelector('#schedule-actions form[action$="/pause"] button').getBoundingClientRect().x + 5`, &x),
		chromedp.Evaluate(`document.querySelector('#schedule-actions form[action$="/pause"] button').getBoundingClientRect().y + 5`, &y))
	b.run(input.DispatchMouseEvent(input.MousePressed, x, y).WithButton(input.Left).WithClickCount(1))
	b.run(fetch.ContinueRequest(id))
	b.waitJS(`window.answers >= 2`) // the refresh's answer came while the button is pressed
	b.run(input.DispatchMouseEvent(input.MouseReleased, x, y).WithButton(input.Left).WithClickCount(1))

	b.waitJS(`document.getElementById("schedule-state") && document.getElementById("schedule-state").textContent.includes("paused")`)
	require.Contains(t, b.text("body"), "Renamed digest", "the held refresh comes once the pointer is up")
	got, err := admin.Schedule(ctx, sc.ID)
	require.NoError(t, err)
	require.Equal(t, events.ScheduleStatePaused, got.State)
	b.checkConsole()
}
