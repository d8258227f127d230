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

// The workflow page in a real headless Chromium: the graph drawn as SVG
// (a box per task, an edge per dependency, links to the tasks), a node's
// status following the live refresh as a worker completes a task, the
// blocked count on the dashboard, the task page's dependencies, and the
// workflow cancelled from its page.
func TestBrowserWorkflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", Label: "Crawl"})
	require.NoError(t, err)
	item := func(ref string, deps ...string) client.NewWorkflowTask {
		return client.NewWorkflowTask{Ref: ref, Title: "do " + ref, TaskTypeID: tt.ID, Params: json.RawMessage(`{}`), DependsOn: deps}
	}
	wf, err := admin.CreateWorkflow(ctx, client.NewWorkflow{Name: "NVDA sentiment", Tasks: []client.NewWorkflowTask{
		item("reddit"), item("stocktwits"), item("report", "reddit", "stocktwits")}})
	require.NoError(t, err)
	_, err = admin.CreateWorker(ctx, client.NewWorker{Email: "w@workers.example.com", Password: "worker-password", FullName: "W", MaxConcurrentTasks: 2})
	require.NoError(t, err)
	w := client.New(s.base, checkedHTTP(t, s.base, nil))
	_, err = w.Login(ctx, "w@workers.example.com", "worker-password")
	require.NoError(t, err)

	b := newBrowser(t)
	b.login(s.base, "/workflows")
	b.waitJS(`document.querySelector("#workflows").textContent.includes("NVDA sentiment")`)
	b.click(`#workflows a[href="/workflows/` + wf.ID + `"]`)
	b.waitJS(`document.querySelectorAll("#workflow-graph a.node").length === 3 && document.querySelectorAll("#workflow-graph line.edge").length === 2`)
	b.waitJS(`document.querySelector('#workflow-graph a[data-ref="report"]').dataset.status === "blocked"`)

	// A worker completes the crawls: the page follows without a reload.
	for range 2 {
		got, err := w.Claim(ctx)
		require.NoError(t, err)
		_, err = w.Complete(ctx, got.ID)
		require.NoError(t, err)
	}
	b.waitJS(`document.querySelector('#workflow-graph a[data-ref="report"]').dataset.status === "pending" &&
		document.querySelector('#workflow-graph a[data-ref="reddit"]').dataset.status === "completed"`)
	require.Contains(t, b.text("#workflow-progress"), "2/3 done")

	// The node links to its task, whose page lists what it waits for.
	b.click(`#workflow-graph a[data-ref="report"]`)
	b.waitJS(`/^\/tasks\/[0-9a-f-]{36}$/.test(location.pathname)`)
	deps := b.text("#task-dependencies")
	require.True(t, strings.Contains(deps, "do reddit") && strings.Contains(deps, "do stocktwits"), deps)
	require.Contains(t, b.text("#task-workflow"), "report")
	b.run(chromedp.Navigate(s.base + "/"))
	b.waitJS(`document.querySelector("#card-blocked .n").textContent.trim() === "0"`)

	// Cancel from the workflow's page.
	b.run(chromedp.Navigate(s.base + "/workflows/" + wf.ID))
	// One evaluation: a live refresh may replace the form at any moment.
	b.run(chromedp.Evaluate(`document.querySelector('form[action="/workflows/`+wf.ID+`/cancel"]').requestSubmit()`, nil))
	b.waitJS(`document.querySelector('#workflow-graph a[data-ref="report"]').dataset.status === "cancelled"`)
	b.checkConsole()
}
