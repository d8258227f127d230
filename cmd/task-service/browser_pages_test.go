package main_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// What a first-time admin trips on, in a real headless Chromium: a manual
// retry past the type's maximum, times in the viewer's zone, "1 task", a
// bulk cancel that asks first and says what it did, a bad ?at= that is not
// asked for again and again, the schedule form's worker picker, the tasks
// waiting for each worker, the worker's page and its actions, and every
// schema error at its own field.
func TestBrowserFirstAdminPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	none := 0
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", Label: "Crawl", MaxRetries: &none,
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["ticker","days"]}`)})
	require.NoError(t, err)
	genesis, err := admin.CreateWorker(ctx, client.NewWorker{Email: "genesis@example.com", Password: "genesis-password", FullName: "Genesis"})
	require.NoError(t, err)
	w := client.New(s.base, checkedHTTP(t, s.base, nil))
	_, err = w.Login(ctx, "genesis@example.com", "genesis-password")
	require.NoError(t, err)
	first, err := admin.CreateTask(ctx, client.NewTask{Title: "Crawl NVDA", TaskTypeID: tt.ID, Params: json.RawMessage(`{"ticker":"NVDA","days":3}`)})
	require.NoError(t, err)
	_, err = w.Claim(ctx)
	require.NoError(t, err)
	_, err = w.Fail(ctx, first.ID, "reddit answered 429")
	require.NoError(t, err)
	retry, err := admin.RetryTask(ctx, first.ID, "wait for the rate limit")
	require.NoError(t, err)
	require.Equal(t, 1, retry.RetryCount)

	b := newBrowser(t)
	// The viewer is in Tokyo: times show there, UTC stays in the tooltip.
	b.run(emulation.SetTimezoneOverride("Asia/Tokyo"))
	b.login(s.base, "/tasks/"+retry.ID)
	require.Equal(t, "Retry 1 (manual)", b.text("h1 + .bar .badge"), "not Retry 1/0")
	var created struct{ Text, Title string }
	b.run(chromedp.Evaluate(`(() => { const t = document.querySelector("time"); return {text: t.textContent, title: t.title}; })()`, &created))
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`, created.Title)
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (GMT\+9|JST)$`, created.Text)

	// The queue holds the retry only; cancel it from the list, confirming.
	b.run(chromedp.Navigate(s.base + "/tasks"))
	require.Contains(t, b.text("#live"), "Queue: 1 task waiting")
	// A checked box holds the live list still; a refresh that lands between
	// the box's query and the click replaces it unchecked, so check the
	// box on the page as it is until it stays checked.
	b.waitJS(`(() => { const c = document.querySelector('input[value="` + retry.ID + `"]'); if (c && !c.checked) c.click(); return c !== null && c.checked; })()`)
	b.click(`button[value="cancel"]`)
	b.waitJS(`document.getElementById("bulk-confirm") !== null`)
	require.Contains(t, b.text("#bulk-confirm"), "1 task will be cancelled")
	require.Contains(t, b.text("#bulk-confirm"), "Crawl NVDA (retry 1)")
	got, err := admin.Task(ctx, retry.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, got.Status, "nothing happens before the confirmation")
	b.run(chromedp.SetValue("#bulk-reason", "NVDA done by hand", chromedp.ByID), chromedp.Click(`#bulk-confirm button[type="submit"]`, chromedp.ByQuery))
	b.waitJS(`document.getElementById("bulk-result") !== null`)
	require.Contains(t, b.text("#bulk-result"), "1 of 1 task cancelled.")
	got, err = admin.Task(ctx, retry.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusCancelled, got.Status)

	// A time that does not parse: a 400 page that does not ask for itself again.
	b.expect("the server responded with a status of 400")
	b.run(chromedp.Navigate(s.base + "/tasks/" + first.ID + "?at=yesterday"))
	b.waitJS(`document.querySelector('input[name="at"][aria-invalid="true"]') !== null`)
	var asked int
	b.run(chromedp.Evaluate(`document.querySelectorAll("[data-live]").length + performance.getEntriesByType("resource").filter((e) => e.name.includes("at=yesterday")).length`, &asked))
	require.Zero(t, asked, "no live region, no refresh of the 400")

	// The schedule form offers the workers by name.
	b.run(chromedp.Navigate(s.base + "/schedules/new"))
	require.Contains(t, b.text("#f-task-assigned_to"), "Genesis")

	// The workers page counts the tasks waiting for each worker.
	_, err = admin.CreateTask(ctx, client.NewTask{Title: "Crawl AMD", TaskTypeID: tt.ID, Params: json.RawMessage(`{"ticker":"AMD","days":1}`), AssignedTo: genesis.ID})
	require.NoError(t, err)
	b.run(chromedp.Navigate(s.base + "/workers"))
	require.Equal(t, "1", b.text(`a[href="/tasks?assignee=`+genesis.ID+`&status=pending"]`))

	// The worker's page, from the list: deactivate it there.
	b.click(`a[href="/workers/` + genesis.ID + `"]`)
	b.waitJS(`document.getElementById("worker-deactivate") !== null`)
	require.Contains(t, b.text("h1"), "Genesis")
	b.run(chromedp.Evaluate(`document.querySelector("#worker-deactivate").closest("details").open = true`, nil),
		chromedp.SetValue("#wd-reason", "machine retired", chromedp.ByID), chromedp.Click(`#worker-deactivate button[type="submit"]`, chromedp.ByQuery))
	b.waitJS(`document.getElementById("worker-notice") !== null`)
	require.Contains(t, b.text("#account-state"), "deactivated")
	u, err := admin.Worker(ctx, genesis.ID)
	require.NoError(t, err)
	require.False(t, u.Active)

	// Every schema error at its own field: no ticker and days=0.
	b.run(chromedp.Navigate(s.base+"/tasks/new?type="+tt.ID), chromedp.WaitVisible("#f-params-days", chromedp.ByID),
		chromedp.SetValue("#title", "Crawl nothing", chromedp.ByID), chromedp.SetValue("#f-params-days", "0", chromedp.ByID),
		chromedp.Click(`#new-task button[type="submit"]`, chromedp.ByQuery))
	b.waitJS(`document.querySelector('#f-params-days[aria-invalid="true"]') !== null`)
	var invalid []string
	b.run(chromedp.Evaluate(`[...document.querySelectorAll('[aria-invalid="true"]')].map((e) => e.id)`, &invalid))
	require.ElementsMatch(t, []string{"f-params-ticker", "f-params-days"}, invalid)
	b.checkConsole()
}
