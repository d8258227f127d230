package main_test

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// Telegram through the real binary: three instances send the notifications
// of a burst of failures to a Bot API fake that first answers 500 and 429;
// every notification arrives, once.

const tgToken = "987654:e2e-secret-token"

// botFake is a minimal Bot API: sendMessage with parse_mode HTML. answer
// may turn request n into an error; otherwise it accepts and records.
type botFake struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests int
	lines    map[string]int
	answer   func(n int) (status int, body string) // 0: accept
}

func newBotFake(t *testing.T, answer func(n int) (int, string)) *botFake {
	f := &botFake{lines: map[string]int{}, answer: answer}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

var tag = regexp.MustCompile(`</?[a-z-]+>`)

func (f *botFake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.requests
	f.requests++
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/bot"+tgToken+"/sendMessage" {
		w.WriteHeader(404)
		fmt.Fprint(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
		return
	}
	if status, answer := f.answer(n); status != 0 {
		w.WriteHeader(status)
		fmt.Fprint(w, answer)
		return
	}
	var req struct {
		ChatID    string `json:"chat_id"`
		Text      string `json:"text"`
		ParseMode string `json:"parse_mode"`
	}
	if json.Unmarshal(body, &req) != nil || req.ChatID != "-100777" || req.ParseMode != "HTML" || req.Text == "" {
		w.WriteHeader(400)
		fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: malformed sendMessage"}`)
		return
	}
	for _, line := range strings.Split(req.Text, "\n") {
		plain := html.UnescapeString(tag.ReplaceAllString(line, ""))
		if !strings.HasPrefix(plain, "📬 ") {
			// A failure's line written before the retry decision says
			// "pending", after it "yes"; which one depends on which reactor
			// gets there first.
			f.lines[strings.Replace(plain, "Retry: pending", "Retry: yes", 1)]++
		}
	}
	fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d}}`, n)
}

func (f *botFake) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.lines))
	for k, v := range f.lines {
		out[k] = v
	}
	return out
}

func telegramCluster(t *testing.T, bot *botFake) *cluster {
	return newCluster(t, 3, "TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_CHAT_ID=-100777",
		"TELEGRAM_API_BASE="+bot.srv.URL, "TELEGRAM_WINDOW=200ms", "TELEGRAM_LEASE=31s")
}

// expectedLines are the notifications of a burst with one retry allowed:
// each task failed ("Retry: yes", or "pending" before the decision) and its
// retry was created.
func expectedLines(n int) []string {
	var out []string
	for i := range n {
		title := fmt.Sprintf("Burst task %d", i)
		out = append(out, fmt.Sprintf("❌ %s failed. Reason: burst failure. Retry: yes", title),
			fmt.Sprintf("🔁 Retry 1/1: %s back in queue.", title))
	}
	return out
}

func TestInstancesTelegramExactlyOnceThroughFaults(t *testing.T) {
	t.Parallel()
	bot := newBotFake(t, func(n int) (int, string) {
		switch {
		case n < 4:
			return 500, `{"ok":false,"error_code":500,"description":"Internal Server Error"}`
		case n < 6:
			return 429, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 1","parameters":{"retry_after":1}}`
		case n == 6:
			return 502, `<html>Bad Gateway</html>`
		}
		return 0, ""
	})
	c := telegramCluster(t, bot)
	retries := 1
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "burst", MaxRetries: &retries})
	require.NoError(t, err)
	ids := c.failBurst(tt, 10, 20, nil)
	want := expectedLines(len(ids))

	c.eventually("every notification to be sent", func() bool {
		return c.count(`SELECT count(*) FROM telegram_outbox WHERE status = 'sent'`) == len(want)
	})
	got := bot.snapshot()
	for _, line := range want {
		require.Equal(t, 1, got[line], "%q delivered %d times", line, got[line])
	}
	require.Len(t, got, len(want), "nothing else was delivered")
	require.Zero(t, c.count(`SELECT count(*) FROM telegram_outbox WHERE status <> 'sent'`))
	require.Greater(t, c.count(`SELECT count(DISTINCT batch_id) FROM telegram_outbox`), 1)
	for _, in := range c.ins {
		in.mu.Lock()
		logs := in.logs.String()
		in.mu.Unlock()
		require.NotContains(t, logs, tgToken)
	}
}

// SIGKILL an instance mid-burst: no notification is lost. One sent in the
// instant between Telegram's answer and the commit of "sent" would go out
// again (at-least-once, docs/adr); at most one batch can be in that window.
func TestInstancesTelegramSurviveKill(t *testing.T) {
	t.Parallel()
	bot := newBotFake(t, func(int) (int, string) { return 0, "" })
	c := telegramCluster(t, bot)
	retries := 1
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crash", MaxRetries: &retries})
	require.NoError(t, err)
	victim := c.ins[1]
	ids := c.failBurst(tt, 10, 20, func() {
		victim.stop(syscall.SIGKILL)
		go victim.start()
	})
	want := expectedLines(len(ids))
	c.eventually("every notification to be sent", func() bool {
		return c.count(`SELECT count(*) FROM telegram_outbox WHERE status = 'sent'`) == len(want)
	})
	got := bot.snapshot()
	doubled := 0
	for _, line := range want {
		require.GreaterOrEqual(t, got[line], 1, "%q lost", line)
		doubled += got[line] - 1
	}
	require.Len(t, got, len(want), "nothing else was delivered")
	require.LessOrEqual(t, doubled, 50, "only the batch in flight at the kill may go out twice")
	t.Logf("lines delivered twice because of the kill: %d", doubled)
}
