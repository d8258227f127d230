package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// Acting on every task a filter matches, in a real headless Chromium:
// filter the list (more tasks than a page), follow "Cancel all matching…",
// see the count and the filter, be refused without a reason, then confirm
// and see the result; every match is cancelled, the rest is not.
func TestBrowserCancelAllMatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", Label: "Crawl"})
	require.NoError(t, err)
	var batch []client.NewTask
	for i := range 130 {
		ticker := "NVDA"
		if i%13 == 0 {
			ticker = "AMD"
		}
		batch = append(batch, client.NewTask{Title: fmt.Sprintf("Crawl %s %d", ticker, i), TaskTypeID: tt.ID, Params: json.RawMessage(`{}`)})
	}
	out, err := admin.CreateTasks(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, 130, out.Created)

	b := newBrowser(t)
	b.expect("status of 400 (Bad Request) " + s.base + "/tasks/matching")
	b.login(s.base, "/tasks?q=nvda&status=pending")
	b.waitJS(`document.getElementById("act-on-all") !== null`)
	require.Contains(t, b.text("#live"), "Next page", "the filter matches more than the visible page")
	b.click(`#act-on-all a[href^="/tasks/matching?action=cancel"]`)
	b.waitJS(`document.getElementById("bulk-confirm") !== null`)
	require.Contains(t, b.text("#bulk-confirm"), "120 tasks match this filter and will be cancelled")
	filter := b.text(".matching-filter")
	require.Contains(t, filter, "nvda")
	require.Contains(t, filter, "pending")

	// No reason: the browser's own check is lifted to reach the server's.
	b.run(chromedp.Evaluate(`document.getElementById("matching-reason").removeAttribute("required")`, nil),
		chromedp.Click(`#bulk-confirm button[type="submit"]`, chromedp.ByQuery))
	b.waitJS(`document.querySelector("#bulk-confirm .form-error") !== null`)
	require.Contains(t, b.text("#bulk-confirm .form-error"), "reason")

	b.run(chromedp.SetValue("#matching-reason", "NVDA feed retired", chromedp.ByID),
		chromedp.Click(`#bulk-confirm button[type="submit"]`, chromedp.ByQuery))
	b.waitJS(`document.getElementById("bulk-result") !== null`)
	require.Contains(t, b.text("#bulk-result"), "120 tasks cancelled; 0 skipped")
	b.checkConsole()

	page, err := admin.Tasks(ctx, client.TaskQuery{Status: "pending", Limit: 200})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 10, "the AMD crawls are left")
	page, err = admin.Tasks(ctx, client.TaskQuery{Status: "cancelled", Limit: 200})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 120)
}
