package main_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// The type page pauses and resumes a type with a reason; the types list and
// the dashboard say "paused: reason" meanwhile, and a task created then
// says "scheduled for" when it has a run_at.
func TestBrowserTypeControls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", Label: "Crawl"})
	require.NoError(t, err)
	task, err := admin.CreateTask(ctx, client.NewTask{Title: "Crawl later", TaskTypeID: tt.ID, RunAt: "2031-05-06T07:08:09Z"})
	require.NoError(t, err)

	b := newBrowser(t)
	b.login(s.base, "/types/"+tt.ID)
	b.run(chromedp.SetValue(`#type-claims input[name="reason"]`, "Reddit API returns 429", chromedp.ByQuery),
		chromedp.Click("#pause-type", chromedp.ByID))
	b.waitJS(`document.getElementById("type-paused")`)
	require.Contains(t, b.text("#type-paused"), "paused: Reddit API returns 429")
	got, err := admin.TaskType(ctx, tt.ID)
	require.NoError(t, err)
	require.True(t, got.Paused)

	b.run(chromedp.Navigate(s.base + "/types"))
	require.Contains(t, b.text("main"), "paused: Reddit API returns 429")
	b.run(chromedp.Navigate(s.base + "/"))
	require.Contains(t, b.text("#held-types"), "paused: Reddit API returns 429")
	require.Contains(t, b.text("#card-scheduled"), "1")
	b.run(chromedp.Navigate(s.base + "/tasks/" + task.ID))
	require.Contains(t, b.text("#task-scheduled"), "scheduled for 2031-05-06")

	b.run(chromedp.Navigate(s.base+"/types/"+tt.ID), chromedp.WaitVisible("#resume-type", chromedp.ByID),
		chromedp.Click("#resume-type", chromedp.ByID))
	b.waitJS(`document.getElementById("pause-type")`)
	got, err = admin.TaskType(ctx, tt.ID)
	require.NoError(t, err)
	require.False(t, got.Paused)
	b.checkConsole()
}
