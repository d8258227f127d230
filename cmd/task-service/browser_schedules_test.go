package main_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The Schedules page in a real headless Chromium: create through the form
// (an error shown at its field first), run now, see the execution, pause
// and resume.
func TestBrowserSchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	_, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "digest", Label: "Digest"})
	require.NoError(t, err)
	b := newBrowser(t)
	b.expect("status of 400 (Bad Request) " + s.base + "/schedules/new")

	b.login(s.base, "/schedules/new")
	b.run(chromedp.SetValue("#f-task-title", "Morning digest", chromedp.ByID),
		chromedp.SetValue("#f-interval-every", "0", chromedp.ByID),
		chromedp.Submit("#f-task-title", chromedp.ByID),
		chromedp.WaitVisible(`#f-task-task_type_id[aria-invalid="true"]`, chromedp.ByQuery))
	b.run(chromedp.Evaluate(`(() => { const s = document.getElementById("f-task-task_type_id"); s.selectedIndex = 1; return s.value })()`, nil),
		chromedp.Submit("#f-task-title", chromedp.ByID),
		chromedp.WaitVisible(`#f-interval-every[aria-invalid="true"]`, chromedp.ByQuery))
	b.run(chromedp.Evaluate(`document.getElementById("f-interval-every").value = ""`, nil),
		chromedp.SetValue("#f-cron", "0 6 * * 1-5", chromedp.ByID),
		chromedp.SetValue("#f-time_zone", "Europe/Berlin", chromedp.ByID),
		chromedp.Submit("#f-task-title", chromedp.ByID))
	b.waitJS(`/^\/schedules\/[0-9a-f-]{36}$/.test(location.pathname)`)
	page := strings.TrimPrefix(b.location(), s.base)
	require.Contains(t, b.text("#schedule-state"), "active")
	require.Contains(t, b.text("body"), `cron "0 6 * * 1-5" Europe/Berlin`)

	// Run now: the new task's page; back on the schedule, its execution.
	b.click(`#schedule-actions form[action$="/run"] button`)
	b.waitJS(`/^\/tasks\/[0-9a-f-]{36}$/.test(location.pathname)`)
	b.run(chromedp.Navigate(s.base + page))
	b.waitJS(`document.querySelectorAll("#executions tbody tr").length === 1 && document.querySelector("#executions").textContent.includes("#1")`)
	require.Contains(t, b.text("#executions"), "pending")

	// Pause and resume from the page.
	b.click(`#schedule-actions form[action$="/pause"] button`)
	b.waitJS(`document.getElementById("schedule-state").textContent.includes("paused")`)
	b.click(`#schedule-actions form[action$="/resume"] button`)
	b.waitJS(`document.getElementById("schedule-state").textContent.includes("active")`)

	// The list shows it.
	b.run(chromedp.Navigate(s.base + "/schedules"))
	b.waitJS(`document.querySelector("#schedules").textContent.includes("Morning digest")`)
	b.checkConsole()
}
