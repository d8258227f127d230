package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The task list's orders in a real headless Chromium: the sort menu swaps
// the list in place and puts the order in the address, the live refresh
// keeps it, a column heading sorts by its column, the page size joins the
// order, and without JavaScript the menu is a form that still works.
func TestBrowserTaskListSorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", ParamSchema: json.RawMessage(`{"type":"object"}`)})
	require.NoError(t, err)
	_, err = admin.CreateWorker(ctx, client.NewWorker{Email: "w@example.com", Password: "w-password-123", FullName: "W"})
	require.NoError(t, err)
	w := client.New(s.base, checkedHTTP(t, s.base, nil))
	_, err = w.Login(ctx, "w@example.com", "w-password-123")
	require.NoError(t, err)
	// run creates a task, then claims and completes the oldest waiting: it
	// ran for how long it did. ran is in the order they started.
	var ran []string
	run := func(title string) {
		t.Helper()
		_, err := admin.CreateTask(ctx, client.NewTask{Title: title, TaskTypeID: tt.ID, Params: json.RawMessage(`{}`)})
		require.NoError(t, err)
		task, err := w.Claim(ctx)
		require.NoError(t, err)
		_, err = w.Complete(ctx, task.ID)
		require.NoError(t, err)
		ran = append(ran, task.ID)
	}
	// longestFirst is what ran, longest run first, as the API tells it.
	longestFirst := func() []string {
		t.Helper()
		took := map[string]time.Duration{}
		for _, id := range ran {
			d, err := admin.Task(ctx, id)
			require.NoError(t, err)
			took[id] = d.CompletedAt.Sub(*d.StartedAt)
		}
		ids := slices.Clone(ran)
		slices.SortFunc(ids, func(a, b string) int { return int(took[b] - took[a]) })
		return ids
	}
	for i := range 3 {
		run(fmt.Sprintf("run %d", i))
	}
	_, err = admin.CreateTask(ctx, client.NewTask{Title: "waiting", TaskTypeID: tt.ID, Params: json.RawMessage(`{}`)})
	require.NoError(t, err)
	rows := `[...document.querySelectorAll('#live input[name="id"]')].map((e) => e.value).join(" ")`

	b := newBrowser(t)
	b.login(s.base, "/tasks")
	b.waitJS(`document.querySelectorAll('#live input[name="id"]').length === 4`)

	// The menu: the list swaps in place, the address keeps the order.
	b.run(chromedp.SetValue(`select[name="sort"]`, "longest", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector('select[name="sort"]').dispatchEvent(new Event("change", {bubbles: true}))`, nil))
	b.waitJS(fmt.Sprintf(`location.search.includes("sort=longest") && %s === %q`, rows, strings.Join(longestFirst(), " ")))
	require.Equal(t, "descending", b.evalString(`document.querySelector('th[aria-sort]').getAttribute("aria-sort")`))
	require.Contains(t, b.text(`th[aria-sort]`), "Duration")

	// A live refresh: a run that ended since joins the list in its place
	// ("waiting" runs; "run 3" waits, and this order does not list it).
	run("run 3")
	b.waitJS(fmt.Sprintf(`%s === %q`, rows, strings.Join(longestFirst(), " ")))
	require.Contains(t, b.location(), "sort=longest")

	// A column heading sorts by its column: latest start first.
	b.click(`th a[title^="sort by start"]`)
	b.waitJS(fmt.Sprintf(`location.search.includes("sort=started") && %s === %q`, rows, strings.Join(reversed(ran), " ")))
	// The page size joins the order.
	b.run(chromedp.SetValue(`select[name="limit"]`, "25", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector('select[name="limit"]').dispatchEvent(new Event("change", {bubbles: true}))`, nil))
	b.waitJS(`location.search.includes("limit=25") && location.search.includes("sort=started")`)

	// Without JavaScript the menu is a form with its own button.
	b.run(emulation.SetScriptExecutionDisabled(true), chromedp.Navigate(s.base+"/tasks"),
		chromedp.WaitVisible(`.filters button[type="submit"]`, chromedp.ByQuery),
		chromedp.SetValue(`select[name="sort"]`, "oldest", chromedp.ByQuery),
		chromedp.Click(`.filters button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`th[aria-sort="ascending"]`, chromedp.ByQuery))
	var ids []string
	b.run(chromedp.Evaluate(`[...document.querySelectorAll('#live input[name="id"]')].map((e) => e.value)`, &ids))
	require.Equal(t, ran, ids[:4], "created, oldest first")
	require.Contains(t, b.location(), "sort=oldest")
	b.checkConsole()
}

func reversed(ids []string) []string {
	out := slices.Clone(ids)
	slices.Reverse(out)
	return out
}
