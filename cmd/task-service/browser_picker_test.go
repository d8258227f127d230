package main_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The worker picker above its bound (issue 24: more than 200 workers), in
// a real headless Chromium against the binary: typing the start of a name
// brings the worker as a suggestion, the assign form sends it and the task
// is assigned to that worker; the tasks list filters by a typed email.
func TestBrowserWorkerPickerAboveTheBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL)
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", ParamSchema: json.RawMessage(`{"type":"object"}`)})
	require.NoError(t, err)
	zoe, err := admin.CreateWorker(ctx, client.NewWorker{Email: "zoe@example.com", Password: "zoe-password-1", FullName: "Zoe Zimmer"})
	require.NoError(t, err)
	// The rest of the fleet straight into the users projection, which is
	// all the pickers read.
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO users (id, email, full_name, is_worker, created_at, version)
		SELECT gen_random_uuid(), 'bulk' || g || '@example.com', 'Bulk ' || g, true, now(), 1 FROM generate_series(1, 220) g`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	task, err := admin.CreateTask(ctx, client.NewTask{Title: "Crawl NVDA", TaskTypeID: tt.ID, Params: json.RawMessage(`{}`)})
	require.NoError(t, err)

	b := newBrowser(t)
	b.login(s.base, "/tasks/"+task.ID)
	b.run(chromedp.Evaluate(`document.querySelector('#actions form[action$="/assign"]').closest("details").open = true`, nil))
	b.waitJS(`document.querySelector('input#assign-worker[list="assign-worker-choices"]') !== null`)
	b.run(chromedp.SendKeys("#assign-worker", "zo", chromedp.ByID))
	const choice = "Zoe Zimmer <zoe@example.com>"
	b.waitJS(`[...document.querySelectorAll("#assign-worker-choices option")].some((o) => o.value === "` + choice + `")`)
	// Picking a suggestion from the browser's own list puts its value in
	// the input (the list is no part of the page a test can click).
	b.run(chromedp.SetValue("#assign-worker", choice, chromedp.ByID),
		chromedp.SendKeys("#assign-reason", "knows the site", chromedp.ByID),
		chromedp.Click(`#actions form[action$="/assign"] button`, chromedp.ByQuery))
	b.waitJS(`document.body.textContent.includes("knows the site")`)
	require.Equal(t, "Zoe Zimmer", b.text(`#h-facts + dl dt:nth-of-type(2) + dd`))
	got, err := admin.Task(ctx, task.ID)
	require.NoError(t, err)
	require.NotNil(t, got.AssignedTo)
	require.Equal(t, zoe.ID, *got.AssignedTo)

	// The list, filtered by a typed email: leaving the field applies it,
	// and the chosen worker is then shown by name.
	_, err = admin.CreateTask(ctx, client.NewTask{Title: "Crawl AMD", TaskTypeID: tt.ID, Params: json.RawMessage(`{}`)})
	require.NoError(t, err)
	b.run(chromedp.Navigate(s.base+"/tasks"), chromedp.WaitVisible("#f-assignee", chromedp.ByID))
	b.waitJS(`document.getElementById("live").textContent.includes("Crawl AMD")`)
	b.run(chromedp.SendKeys("#f-assignee", "zoe@example.com", chromedp.ByID), chromedp.Click("#q", chromedp.ByID))
	b.waitJS(`new URLSearchParams(location.search).get("assignee") === "zoe@example.com" && !document.getElementById("live").textContent.includes("Crawl AMD")`)
	require.Contains(t, b.text("#live"), "Crawl NVDA")
	b.run(chromedp.Reload())
	b.waitJS(`document.getElementById("f-assignee").value === "` + choice + `"`)
	require.NotContains(t, b.text("#live"), "Crawl AMD")
}
