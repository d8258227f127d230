package main_test

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
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
	messages []string                              // each accepted message, in plain text
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
	plain := html.UnescapeString(tag.ReplaceAllString(req.Text, ""))
	f.messages = append(f.messages, plain)
	for _, line := range strings.Split(plain, "\n") {
		if !strings.HasPrefix(line, "📬 ") {
			f.lines[line]++
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

func (f *botFake) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.messages)
}

func telegramCluster(t *testing.T, bot *botFake) *cluster {
	return newCluster(t, 3, "TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_CHAT_ID=-100777",
		"TELEGRAM_API_BASE="+bot.srv.URL, "TELEGRAM_WINDOW=200ms", "TELEGRAM_LEASE=31s")
}

// expectedLines are the notifications of a burst with one retry allowed:
// each task failed and its retry was created. A failure's line says
// "created (#id)" whenever that is known when it is sent: written after the
// decision, or sent in the same message as the retry's line (the message
// check below); only a line sent ahead of its decision says "pending".
func expectedLines(c *cluster, ids []string) []string {
	var out []string
	for i, id := range ids {
		title := fmt.Sprintf("Burst task %d", i)
		out = append(out, fmt.Sprintf("❌ %s failed. Reason: burst failure. Retry: created (#%s)", title, c.retryOf(id)),
			fmt.Sprintf("🔁 Retry 1/1: %s back in queue.", title))
	}
	return out
}

// retryOf is the retry the retry reactor created for task id.
func (c *cluster) retryOf(id string) string {
	c.t.Helper()
	var retry string
	require.NoError(c.t, c.pool.QueryRow(c.ctx, `SELECT retry_task_id::text FROM worker_tasks WHERE id = $1`, id).Scan(&retry))
	return retry
}

// deliveredLines counts what the bot received per line, a "pending" answer
// counted as the decision that followed it, after checking that no message
// says "pending" above its own retry's line.
func deliveredLines(t *testing.T, bot *botFake, want []string) map[string]int {
	t.Helper()
	decided := map[string]string{} // the pending form of each failure line → its decided form
	for _, line := range want {
		if i := strings.Index(line, "Retry: created"); i >= 0 {
			decided[line[:i]+"Retry: pending"] = line
		}
	}
	for _, msg := range bot.sent() {
		for _, line := range strings.Split(msg, "\n") {
			if full, ok := decided[line]; ok {
				title := strings.TrimSuffix(strings.TrimPrefix(line, "❌ "), " failed. Reason: burst failure. Retry: pending")
				require.NotContains(t, msg, "🔁 Retry 1/1: "+title+" back in queue.", "%q went out above its decision (%q)", line, full)
			}
		}
	}
	got := map[string]int{}
	for line, n := range bot.snapshot() {
		if full, ok := decided[line]; ok {
			line = full
		}
		got[line] += n
	}
	return got
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
	c.eventually("every retry to be created", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND retry_task_id IS NOT NULL`, ids) == len(ids)
	})
	want := expectedLines(c, ids)

	c.eventually("every notification to be sent", func() bool {
		return c.count(`SELECT count(*) FROM telegram_outbox WHERE status = 'sent'`) == len(want)
	})
	got := deliveredLines(t, bot, want)
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
	c.eventually("every retry to be created", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND retry_task_id IS NOT NULL`, ids) == len(ids)
	})
	want := expectedLines(c, ids)
	c.eventually("every notification to be sent", func() bool {
		return c.count(`SELECT count(*) FROM telegram_outbox WHERE status = 'sent'`) == len(want)
	})
	got := deliveredLines(t, bot, want)
	doubled := 0
	for _, line := range want {
		require.GreaterOrEqual(t, got[line], 1, "%q lost", line)
		doubled += got[line] - 1
	}
	require.Len(t, got, len(want), "nothing else was delivered")
	require.LessOrEqual(t, doubled, 50, "only the batch in flight at the kill may go out twice")
	t.Logf("lines delivered twice because of the kill: %d", doubled)
}

// TestTelegramBatchText: through the real binary, a failure and the retry
// reactor's decision on it go out in one message, in the order they
// happened, and the failure's line carries that decision: the retry it
// created, or that none is left (the urgent alert after it, not above).
func TestTelegramBatchText(t *testing.T) {
	t.Parallel()
	bot := newBotFake(t, func(int) (int, string) { return 0, "" })
	c := newCluster(t, 1, "TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_CHAT_ID=-100777",
		// A window long enough for the retry reactor's decision to follow
		// the failure on a loaded machine (the consumers wait for the
		// cluster-wide xid horizon).
		"TELEGRAM_API_BASE="+bot.srv.URL, "TELEGRAM_WINDOW=10s")
	one, none := 1, 0
	retried, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "retried", MaxRetries: &one})
	require.NoError(t, err)
	final, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "final", MaxRetries: &none})
	require.NoError(t, err)
	w := c.worker("batcher", 1)
	failOne := func(tt *events.TaskType, title string) string {
		task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: title, TaskTypeID: tt.ID, AssignedTo: w.id})
		require.NoError(t, err)
		c.claimAndFail(w, 0, task.ID)
		return task.ID
	}
	messages := func(n int) []string {
		c.eventually(fmt.Sprintf("%d messages", n), func() bool { return len(bot.sent()) >= n })
		return bot.sent()
	}

	id := failOne(retried, "Crawl NVDA")
	first := messages(1)[0]
	require.Equal(t, "📬 2 updates\n"+
		"❌ Crawl NVDA failed. Reason: burst failure. Retry: created (#"+c.retryOf(id)+")\n"+
		"🔁 Retry 1/1: Crawl NVDA back in queue.", first)

	failOne(final, "Export AMD")
	require.Equal(t, "📬 2 updates\n"+
		"❌ Export AMD failed. Reason: burst failure. Retry: exhausted\n"+
		"🚨 Export AMD failed after 1 attempt. Needs human attention.", messages(2)[1])
}
