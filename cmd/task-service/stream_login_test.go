package main_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// openStream is one live tail read line by line, as curl or a browser would.
type openStream struct {
	name   string
	events atomic.Int64 // data frames received
	ended  chan streamEnd
}

// streamEnd is how a stream ended: its last named event and when.
type streamEnd struct {
	event, data string
	at          time.Time
	err         error
}

// openTail opens GET /admin/events/stream on base; auth sets the request's
// credentials (a bearer header, the session cookie or ?token=).
func openTail(t *testing.T, name, base string, auth func(*http.Request)) *openStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	var resp *http.Response
	// 503 "retry shortly" is the stream's answer while the instance's
	// listener reconnects (a loaded machine drops it now and then): retry,
	// as a client is told to.
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/admin/events/stream", nil)
		require.NoError(t, err)
		auth(req)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		if resp.StatusCode != http.StatusServiceUnavailable || try == 20 {
			break
		}
		resp.Body.Close()
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, resp.StatusCode, name)
	s := &openStream{name: name, ended: make(chan streamEnd, 1)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var end streamEnd
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				end.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && end.event == "":
				s.events.Add(1)
			case strings.HasPrefix(line, "data: "):
				end.data = strings.TrimPrefix(line, "data: ")
			}
		}
		end.at, end.err = time.Now(), sc.Err()
		s.ended <- end
	}()
	return s
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func sessionCookie(tok string) func(*http.Request) {
	return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: tok}) }
}

func streamToken(tok string) func(*http.Request) {
	return func(r *http.Request) { r.URL.RawQuery = url.Values{"token": {tok}}.Encode() }
}

// live waits until every stream has delivered an event made by poke.
func live(t *testing.T, poke func(), streams ...*openStream) {
	t.Helper()
	poke()
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range streams {
		for s.events.Load() == 0 {
			require.True(t, time.Now().Before(deadline), "%s delivers no event", s.name)
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// endedWith waits for s to end and checks its last event.
func endedWith(t *testing.T, s *openStream, event, data string) streamEnd {
	t.Helper()
	select {
	case end := <-s.ended:
		require.Equal(t, event, end.event, "%s ended with the wrong event (data %q, err %v)", s.name, end.data, end.err)
		require.Contains(t, end.data, data, s.name)
		return end
	case <-time.After(15 * time.Second):
		t.Fatalf("%s is still open 15 s later", s.name)
		return streamEnd{}
	}
}

// TestInstancesStreamEndsWithLogin: two instances of the real binary. An
// admin's open event streams on instance 0 (the API's bearer tail, the admin
// UI's cookie stream and a stream-token stream) end with auth_expired within
// a second of the admin's deactivation, password reset or loss of the admin
// role on instance 1.
func TestInstancesStreamEndsWithLogin(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	rootB := client.New(c.ins[1].base, c.hc)
	rootB.SetToken(c.admin.Token())
	u, err := c.admin.CreateWorker(c.ctx, client.NewWorker{Email: "watcher@example.com", Password: "watcher-password", FullName: "Watcher"})
	require.NoError(t, err)
	yes, no := true, false
	_, err = rootB.UpdateWorker(c.ctx, u.ID, client.WorkerEdit{IsAdmin: &yes})
	require.NoError(t, err)
	pokes := 0
	poke := func() {
		pokes++
		_, err := rootB.CreateWorker(c.ctx, client.NewWorker{Email: fmt.Sprintf("poke%d@example.com", pokes), Password: "poke-password", FullName: "Poke"})
		require.NoError(t, err)
	}

	for _, tc := range []struct {
		name, password string // the watcher's password before the change
		revoke         func()
		says           string
	}{
		{"deactivation", "watcher-password", func() {
			_, err := rootB.DeactivateWorker(c.ctx, u.ID, "left the team")
			require.NoError(t, err)
		}, "deactivated"},
		{"password reset", "watcher-password", func() {
			_, err := rootB.ResetPassword(c.ctx, u.ID, "a-brand-new-password")
			require.NoError(t, err)
		}, "revoked"},
		{"role change", "a-brand-new-password", func() {
			_, err := rootB.UpdateWorker(c.ctx, u.ID, client.WorkerEdit{IsAdmin: &no})
			require.NoError(t, err)
		}, "revoked"},
	} {
		watcher := client.New(c.ins[0].base, c.hc)
		_, err := watcher.Login(c.ctx, "watcher@example.com", tc.password)
		require.NoError(t, err, tc.name)
		st, err := watcher.StreamToken(c.ctx)
		require.NoError(t, err)
		streams := []*openStream{
			openTail(t, tc.name+": bearer", c.ins[0].base, bearer(watcher.Token())),
			openTail(t, tc.name+": session cookie", c.ins[0].base, sessionCookie(watcher.Token())),
			openTail(t, tc.name+": stream token", c.ins[0].base, streamToken(st.Token)),
		}
		live(t, poke, streams...)

		start := time.Now()
		tc.revoke()
		for _, s := range streams {
			end := endedWith(t, s, "auth_expired", tc.says)
			took := end.at.Sub(start)
			t.Logf("%s on instance 1 ended the stream on instance 0 after %s", s.name, took)
			require.Less(t, took, time.Second, s.name)
		}
		if tc.name == "deactivation" {
			_, err := rootB.ReactivateWorker(c.ctx, u.ID, "back")
			require.NoError(t, err)
		}
	}
}

// TestStreamEndsAtTokenExpiry: with TOKEN_TTL=4s, a stream opened by the
// login token (bearer or session cookie) or by a stream token issued for
// it ends with auth_expired when the login expires, not later.
func TestStreamEndsAtTokenExpiry(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, "TOKEN_TTL=4s")
	admin := client.New(c.ins[0].base, c.hc)
	login, err := admin.Login(c.ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	st, err := admin.StreamToken(c.ctx)
	require.NoError(t, err)
	require.False(t, st.ExpiresAt.After(login.ExpiresAt), "a stream token does not outlive its login")
	streams := []*openStream{
		openTail(t, "bearer", c.ins[0].base, bearer(admin.Token())),
		openTail(t, "session cookie", c.ins[0].base, sessionCookie(admin.Token())),
		openTail(t, "stream token", c.ins[0].base, streamToken(st.Token)),
	}
	live(t, func() {
		_, err := admin.CreateWorker(c.ctx, client.NewWorker{Email: "poke@example.com", Password: "poke-password", FullName: "Poke"})
		require.NoError(t, err)
	}, streams...)
	for _, s := range streams {
		end := endedWith(t, s, "auth_expired", "expired")
		// The token's exp is in whole seconds (truncated), so it may come up
		// to a second before the login's expires_at.
		late := end.at.Sub(login.ExpiresAt)
		t.Logf("%s ended %s after the login's expires_at", s.name, late)
		require.Greater(t, late, -1100*time.Millisecond, s.name)
		require.Less(t, late, time.Second, s.name)
	}
}

// TestBrowserLeavesWhenLoginEnds: an admin watching the live events page in
// Chromium is sent to /login?expired=1 when another admin deactivates them:
// the page follows the stream's auth_expired at once, without reconnecting
// first (a refused reconnect would show in the console as a failed load).
func TestBrowserLeavesWhenLoginEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startServer(t, storetest.NewDB(t))
	root := s.rootAdmin(t)
	u, err := root.CreateWorker(ctx, client.NewWorker{Email: "watcher@example.com", Password: "watcher-password", FullName: "Watcher"})
	require.NoError(t, err)
	yes := true
	_, err = root.UpdateWorker(ctx, u.ID, client.WorkerEdit{IsAdmin: &yes})
	require.NoError(t, err)

	b := newBrowser(t)
	b.run(chromedp.Navigate(s.base+"/login?next=/events"), chromedp.WaitVisible("#email", chromedp.ByID),
		chromedp.SendKeys("#email", "watcher@example.com", chromedp.ByID),
		chromedp.SendKeys("#password", "watcher-password", chromedp.ByID),
		chromedp.Submit("#password", chromedp.ByID))
	b.waitJS(`location.pathname === "/events" && document.getElementById("tail-status").textContent === "live"`)

	_, err = root.DeactivateWorker(ctx, u.ID, "left the team")
	require.NoError(t, err)
	b.waitJS(`location.pathname === "/login" && new URLSearchParams(location.search).get("expired") === "1"`)
	var next string
	b.run(chromedp.Evaluate(`new URLSearchParams(location.search).get("next")`, &next))
	require.Equal(t, "/events", next)
	b.checkConsole()
}
