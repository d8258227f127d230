package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// TestScreenshots writes a PNG of every admin UI page into $UI_SCREENSHOTS
// (make screenshots: docs/ui), from a database seeded through the API the
// way a small fleet would fill it. Without UI_SCREENSHOTS it does nothing.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("UI_SCREENSHOTS")
	if dir == "" {
		t.Skip("set UI_SCREENSHOTS to a directory (make screenshots)")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := client.New(s.base, nil)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	seed := seedFleet(t, ctx, admin, s.base)

	b := newBrowser(t)
	b.login(s.base, "/tasks")
	shots := []struct{ name, path string }{
		{"dashboard", "/"},
		{"tasks", "/tasks"},
		{"task", "/tasks/" + seed.retried},
		{"task-new", "/tasks/new?type=" + seed.typeID},
		{"types", "/types"},
		{"type", "/types/" + seed.typeID},
		{"workers", "/workers"},
		{"worker", "/workers/" + seed.workerID},
		{"events", "/events"},
		{"schedules", "/schedules"},
		{"schedule-new", "/schedules/new"},
	}
	shoot := func(file, path string, width, height int64, dark bool) {
		scheme := "light"
		if dark {
			scheme = "dark"
		}
		var png []byte
		b.run(chromedp.EmulateViewport(width, height),
			emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}),
			chromedp.Navigate(s.base+path), chromedp.WaitReady("main", chromedp.ByQuery),
			chromedp.Sleep(300*time.Millisecond), chromedp.CaptureScreenshot(&png))
		require.NoError(t, os.WriteFile(filepath.Join(dir, file+".png"), png, 0o644))
		t.Logf("screenshot %s (%s, %dx%d)", file, path, width, height)
	}
	for _, sh := range shots {
		shoot(sh.name, sh.path, 1280, 800, false)
	}
	shoot("dashboard-dark", "/", 1280, 800, true)
	shoot("task-dark", "/tasks/"+seed.retried, 1280, 800, true)
	shoot("tasks-phone", "/tasks", 390, 844, false)
	shoot("task-phone", "/tasks/"+seed.retried, 390, 844, true)
	b.run(chromedp.Click(".logout button", chromedp.ByQuery))
	b.waitJS(`location.pathname === "/login"`)
	shoot("login", "/login", 1280, 800, false)
	b.checkConsole()
}

type fleet struct{ typeID, retried, workerID string }

// seedFleet makes types, workers and a few dozen tasks in every state, a
// retry chain among them.
func seedFleet(t *testing.T, ctx context.Context, admin *client.Client, base string) fleet {
	t.Helper()
	retries := 3
	crawl, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "reddit_crawl", Label: "Reddit Crawl",
		SOP: "1. Fetch the posts of the last N days for the ticker from Arctic Shift.\n2. Keep title, score, comments.\n3. Upload posts.jsonl and post a summary.",
		ParamSchema: json.RawMessage(`{"type":"object","required":["ticker","days"],"properties":{
			"ticker":{"type":"string","description":"Stock ticker, e.g. NVDA"},
			"days":{"type":"integer","minimum":1,"maximum":90},
			"subreddits":{"type":"array","items":{"type":"string"}},
			"sort":{"enum":["new","top","hot"]},
			"include_comments":{"type":"boolean"},
			"filters":{"type":"object"}}}`), MaxRetries: &retries})
	require.NoError(t, err)
	review, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "code_review", Label: "Code Review",
		SOP: "Review the pull request; run the tests.", ParamSchema: json.RawMessage(`{"type":"object","properties":{"repo":{"type":"string"},"pr":{"type":"integer"}}}`)})
	require.NoError(t, err)
	_, err = admin.CreateTaskType(ctx, client.NewTaskType{Name: "summarise", Label: "Summarise", SOP: "Summarise the document."})
	require.NoError(t, err)

	var workers []*client.Client
	var workerID string
	for i, name := range []string{"Genesis", "Exodus", "Leviticus", "Numbers"} {
		email := fmt.Sprintf("bot-%d@example.com", i+1)
		u, err := admin.CreateWorker(ctx, client.NewWorker{Email: email, Password: "worker-password", FullName: name, MaxConcurrentTasks: 2})
		require.NoError(t, err)
		if i == 0 {
			workerID = u.ID
		}
		w := client.New(base, nil)
		_, err = w.Login(ctx, email, "worker-password")
		require.NoError(t, err)
		if i < 3 {
			require.NoError(t, w.Heartbeat(ctx, client.Heartbeat{Status: "working", Metadata: map[string]any{"host": fmt.Sprintf("agent-%d", i+1), "model": "claude-sonnet-4-5", "restart_count": i, "version": "v1.4.0"}}))
		}
		workers = append(workers, w)
	}
	prios := []string{"urgent", "high", "medium", "low"}
	tickers := []string{"NVDA", "AMD", "TSLA", "AAPL", "MSFT", "META", "GOOG", "AMZN", "INTC", "PLTR"}
	var ids []string
	for i, tk := range tickers {
		task, err := admin.CreateTask(ctx, client.NewTask{Title: "Reddit crawl for " + tk, TaskTypeID: crawl.ID,
			Priority: events.Priority(prios[i%4]), Params: json.RawMessage(fmt.Sprintf(`{"ticker":%q,"days":%d,"subreddits":["wallstreetbets","stocks"]}`, tk, 7+i))})
		require.NoError(t, err)
		ids = append(ids, task.ID)
	}
	for i := 1; i <= 6; i++ {
		_, err := admin.CreateTask(ctx, client.NewTask{Title: fmt.Sprintf("Review PR %d", 40+i), TaskTypeID: review.ID,
			Priority: events.Priority(prios[(i+1)%4]), Params: json.RawMessage(fmt.Sprintf(`{"repo":"acme/api","pr":%d}`, 40+i))})
		require.NoError(t, err)
	}
	// Workers take some: complete, fail (a retry follows), keep working.
	var retried string
	for i, w := range workers[:3] {
		got, err := w.Claim(ctx)
		require.NoError(t, err)
		require.NoError(t, w.PostUpdate(ctx, got.ID, "collected 300 posts from r/wallstreetbets"))
		switch i {
		case 0:
			require.NoError(t, w.PostResult(ctx, got.ID, map[string]any{"posts": 847, "file": "posts.jsonl"}))
			_, err = w.Complete(ctx, got.ID)
		case 1:
			require.NoError(t, w.PostUpdate(ctx, got.ID, "r/stocks: HTTP 429 after 50 calls, backing off"))
			_, err = w.Fail(ctx, got.ID, "Arctic Shift API returned 429 after 50 calls")
			retried = got.ID
		}
		require.NoError(t, err)
		got, err = w.Claim(ctx)
		require.NoError(t, err)
		if got != nil && i == 0 {
			_, err = w.Complete(ctx, got.ID)
			require.NoError(t, err)
		}
	}
	_, err = admin.CancelTask(ctx, ids[len(ids)-1], "duplicate of an earlier crawl")
	require.NoError(t, err)
	_, err = admin.CreateSchedule(ctx, client.NewSchedule{Name: "Daily NVDA crawl", Cron: "0 6 * * 1-5", TimeZone: "Europe/Berlin",
		Task: events.ScheduleTemplate{TaskTypeID: crawl.ID, Title: "Reddit crawl for NVDA", Priority: events.PriorityHigh,
			Params: json.RawMessage(`{"ticker":"NVDA","days":1}`)}})
	require.NoError(t, err)
	_, err = admin.CreateSchedule(ctx, client.NewSchedule{Name: "Hourly review sweep", Interval: &events.Interval{Every: 1, Unit: "hours"},
		Task: events.ScheduleTemplate{TaskTypeID: review.ID, Title: "Review open PRs", Priority: events.PriorityMedium, Params: json.RawMessage(`{"repo":"acme/api"}`)}})
	require.NoError(t, err)
	// Let the retry reactor make the retry, then show the retry's page.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ch, err := admin.TaskChain(ctx, retried)
		require.NoError(t, err)
		if len(ch.Attempts) == 2 {
			return fleet{typeID: crawl.ID, retried: ch.Attempts[1].TaskID, workerID: workerID}
		}
		time.Sleep(100 * time.Millisecond)
	}
	d, err := admin.Task(ctx, retried)
	require.NoError(t, err)
	t.Fatalf("no retry after 60 s: %s %v %v", d.Status, d.RetryOutcome, d.FailureKind)
	return fleet{}
}
