package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// axeScript is the source of axe-core's axe.min.js: $AXE_JS (make test and .ci/run set
// it from scripts/axe.sh), else where scripts/axe.sh puts it. Without it
// the test skips, saying what to run, except under CI=true, where it fails.
func axeScript(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("AXE_JS"); path != "" {
		src, err := os.ReadFile(path)
		require.NoError(t, err, "AXE_JS: run scripts/axe.sh, which installs axe-core and prints its path")
		return string(src)
	}
	cache, err := os.UserCacheDir()
	if err == nil {
		matches, _ := filepath.Glob(filepath.Join(cache, "task-service", "axe-core-4.*", "node_modules", "axe-core", "axe.min.js"))
		if len(matches) > 0 {
			src, err := os.ReadFile(matches[len(matches)-1])
			require.NoError(t, err)
			return string(src)
		}
	}
	msg := "no axe-core: run scripts/axe.sh (it installs axe-core from npm into ~/.cache/task-service and prints the path to set as AXE_JS)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// axeViolation is one rule axe-core found broken, with the nodes that break it.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeRun runs axe-core's WCAG 2 A and AA rules (%s: the tags, or
// the rules) on the page shown and returns the serious and critical
// violations.
const axeRun = `axe.run(document, {runOnly: %s, resultTypes: ["violations"]})
  .then((r) => r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => n.target.join(" ") + " — " + (n.failureSummary || "").replace(/\s+/g, " "))})))`

// Every page of the admin UI, light and dark, has no serious or critical
// violation of WCAG 2 A and AA as axe-core finds them.
func TestBrowserAccessibility(t *testing.T) {
	t.Parallel()
	axeJS := axeScript(t)
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	admin := s.rootAdmin(t)
	seed := seedFleet(t, ctx, admin, s.base)
	plain, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "watch", Label: "Watch",
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}},"required":["ticker"]}`)})
	require.NoError(t, err)
	wf, err := admin.CreateWorkflow(ctx, client.NewWorkflow{Name: "NVDA sentiment", Tasks: []client.NewWorkflowTask{
		{Ref: "crawl", Title: "Crawl NVDA", TaskTypeID: plain.ID, Params: json.RawMessage(`{"ticker":"NVDA"}`)},
		{Ref: "report", Title: "Report on NVDA", TaskTypeID: plain.ID, Params: json.RawMessage(`{"ticker":"NVDA"}`), DependsOn: []string{"crawl"}}}})
	require.NoError(t, err)
	rule, err := admin.CreateFreshnessRule(ctx, client.NewFreshnessRule{Name: "watchlist", TaskTypeID: plain.ID,
		TitleTemplate: "Watch {{key}}", ParamsTemplate: `{"ticker": "{{key}}"}`, MaxAge: "6h",
		Keys: []events.FreshnessKey{{Key: "NVDA", Weight: 5}, {Key: "AMD", Weight: 1, Rising: true}}})
	require.NoError(t, err)
	schedules, err := admin.Schedules(ctx, client.ScheduleQuery{})
	require.NoError(t, err)
	require.NotEmpty(t, schedules)

	pages := []string{
		"/", "/tasks", "/tasks/" + seed.retried, "/tasks/new", "/tasks/new?type=" + seed.typeID,
		"/tasks/matching?action=cancel&status=pending", "/tasks/0190c6e2-9bd4-7c8a-b6a1-2f3e4d5c6b7a",
		"/workflows", "/workflows/" + wf.ID, "/types", "/types/new", "/types/" + seed.typeID,
		"/workers", "/workers/" + seed.workerID, "/events", "/schedules", "/schedules/new", "/schedules/" + schedules[0].ID,
		"/freshness", "/freshness/new", "/freshness/" + rule.ID, "/replay/what-if",
	}
	b := newBrowser(t)
	b.expect("status of 404 (Not Found) " + s.base + "/tasks/0190c6e2")
	// axe-core in every page, before the page's own scripts.
	b.run(chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(axeJS).Do(ctx)
		return err
	}))
	b.login(s.base, "/tasks")
	found := map[string][]string{} // "light /tasks" -> violations
	check := func(path string) {
		t.Helper()
		b.waitJS(`document.querySelector("main") !== null && typeof axe === "object"`)
		// The dark theme changes colours only (app.css): in it, the rules
		// on colour; in the light one, every rule.
		for _, theme := range []struct{ scheme, rules string }{
			{"light", `{type: "tag", values: ["wcag2a", "wcag2aa"]}`},
			{"dark", `{type: "rule", values: ["color-contrast", "link-in-text-block"]}`},
		} {
			var vs []axeViolation
			b.run(emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: theme.scheme}}),
				chromedp.Evaluate(fmt.Sprintf(axeRun, theme.rules), &vs, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
			for _, v := range vs {
				found[theme.scheme+" "+path] = append(found[theme.scheme+" "+path],
					fmt.Sprintf("%s (%s, %s): %d nodes\n      %s", v.ID, v.Impact, v.Help, len(v.Nodes), strings.Join(v.Nodes, "\n      ")))
			}
		}
	}
	for _, path := range pages {
		b.run(chromedp.Navigate(s.base + path))
		check(path)
	}
	// The what-if page's answer, asked through its form: one more retry
	// for the seeded type, whose chains the reactor retried.
	b.run(chromedp.Navigate(s.base + "/replay/what-if"))
	b.waitJS(`document.getElementById("f-policy") !== null`)
	b.run(chromedp.SetValue("#f-policy", `{"types": {"reddit_crawl": {"max_retries": 4}}, "worker_offline_after": "20m"}`, chromedp.ByQuery),
		chromedp.SetValue("#f-since", "1d", chromedp.ByQuery))
	b.click(`form[aria-label="What-if policy"] button[type="submit"]`)
	b.waitJS(`document.getElementById("whatif-result") !== null`)
	check("/replay/what-if?run=1")
	// The bulk action's confirm step, a page a form posts to.
	b.run(chromedp.Navigate(s.base + "/tasks"))
	b.click(`#live input[name="id"]`) // a checked box holds the live list still
	b.click(`button[value="cancel"]`)
	b.waitJS(`document.getElementById("bulk-confirm") !== null`)
	check("/tasks/bulk")
	b.run(chromedp.Click(".logout button", chromedp.ByQuery))
	b.waitJS(`location.pathname === "/login"`)
	check("/login")

	total := 0
	var report strings.Builder
	for where, vs := range found {
		for _, v := range vs {
			total++
			fmt.Fprintf(&report, "%s: %s\n", where, v)
		}
	}
	require.Zero(t, total, "serious or critical axe-core violations:\n%s", report.String())
	b.checkConsole()
}
