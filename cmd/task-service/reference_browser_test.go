package main_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/clawdbot/task-service/api/reference"
	"github.com/clawdbot/task-service/store/storetest"
)

// TestBrowserAPIReference opens /api/docs in headless Chromium: Redoc loads
// from this server, reads the document and renders its operations, within
// the page's Content-Security-Policy and with no console error.
func TestBrowserAPIReference(t *testing.T) {
	t.Parallel()
	s := startServer(t, storetest.NewDB(t))
	b := newBrowser(t)
	// Redoc's footer logo lives on Redocly's CDN: the policy refuses it,
	// which is the point (Redoc then hides it).
	b.expect("cdn.redoc.ly")
	b.run(chromedp.Navigate(s.base + "/api/docs"))
	b.waitJS(`document.body.innerText.includes("Claim the next task")`)
	b.waitJS(`[...document.querySelectorAll("script")].every(s => s.src.startsWith(location.origin + "` + reference.ScriptPath + `"))`)
	b.checkConsole()
}
