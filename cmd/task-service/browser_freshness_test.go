package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The Freshness page in a real headless Chromium: create a rule through the
// form (a template that does not parse shown at its field first); the
// server's loop creates the keys' tasks and the page, refreshed by the live
// tail, shows each key waiting for its task; pause and resume.
func TestBrowserFreshness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t), "FRESHNESS_CATCH_UP=1s")
	admin := s.rootAdmin(t)
	_, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "reddit_crawl", Label: "Reddit crawl",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}},"required":["ticker"]}`)})
	require.NoError(t, err)
	b := newBrowser(t)
	b.expect("status of 400 (Bad Request) " + s.base + "/freshness/new")

	b.login(s.base, "/freshness/new")
	b.run(chromedp.Evaluate(`(() => { const s = document.getElementById("f-task_type_id"); s.selectedIndex = 1; return s.value })()`, nil),
		chromedp.SetValue("#f-name", "watchlist", chromedp.ByID),
		chromedp.SetValue("#f-title_template", "Reddit crawl for {{key}}", chromedp.ByID),
		chromedp.SetValue("#f-params_template", `{"ticker": "{{key"}`, chromedp.ByID),
		chromedp.SetValue("#f-keys", "NVDA:5\nINTC:1\nAMD:2:rising", chromedp.ByID),
		chromedp.Submit("#f-name", chromedp.ByID),
		chromedp.WaitVisible(`#f-params_template[aria-invalid="true"]`, chromedp.ByQuery))
	require.Contains(t, b.text("body"), "is not closed with }}")
	b.run(chromedp.SetValue("#f-params_template", `{"ticker": "{{key}}"}`, chromedp.ByID),
		chromedp.Submit("#f-name", chromedp.ByID))
	b.waitJS(`/^\/freshness\/[0-9a-f-]{36}$/.test(location.pathname)`)
	page := strings.TrimPrefix(b.location(), s.base)
	require.Contains(t, b.text("#rule-state"), "active")

	// Every key gets its task at once; the live tail refreshes the page.
	b.waitJS(`[...document.querySelectorAll("#rule-keys tbody tr")].length === 3 &&
		[...document.querySelectorAll("#rule-keys td.next")].every(td => td.textContent.includes("when its task ends"))`)
	require.Contains(t, b.text(`#rule-keys tr[data-key="AMD"]`), "rising")

	b.click(`#rule-actions form[action$="/pause"] button`)
	b.waitJS(`document.getElementById("rule-state").textContent.includes("paused")`)
	b.click(`#rule-actions form[action$="/resume"] button`)
	b.waitJS(`document.getElementById("rule-state").textContent.includes("active")`)

	b.run(chromedp.Navigate(s.base + "/freshness"))
	b.waitJS(`document.querySelector("#freshness-rules").textContent.includes("watchlist")`)
	require.Contains(t, b.text(`#freshness-rules a[href="`+page+`"]`), "watchlist")
	b.checkConsole()
}
