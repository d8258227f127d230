package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// Telegram commands through the real binary (ADR 022): a fake Bot API
// that speaks the real protocol takes sendMessage and answers getUpdates;
// the tests post Updates to the webhook as Telegram does.

const (
	tgHookSecret = "hook-secret-0123456789"
	tgTeamChat   = int64(-100777)
	tgAdmin      = int64(4242)
	tgMember     = int64(5151)
	// tgBlockedChat removed the bot: Telegram answers 403 to a message there.
	tgBlockedChat = "-998"
)

// tgBot is the Bot API: sendMessage to any chat, and getUpdates over a
// queue of updates with Telegram's offset rule (an offset confirms every
// update before it) and long polling.
type tgBot struct {
	srv *httptest.Server

	mu      sync.Mutex
	sent    []tgSent
	queue   []map[string]any
	changed chan struct{} // closed when the queue grows
}

type tgSent struct {
	chat string
	text string // as sent (HTML)
}

func newTGBot(t *testing.T) *tgBot {
	b := &tgBot{changed: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *tgBot) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/bot" + tgToken + "/sendMessage":
		var req struct {
			ChatID    string `json:"chat_id"`
			Text      string `json:"text"`
			ParseMode string `json:"parse_mode"`
		}
		if json.Unmarshal(body, &req) != nil || req.ChatID == "" || req.ParseMode != "HTML" || req.Text == "" {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: malformed sendMessage"}`)
			return
		}
		if req.ChatID == tgBlockedChat {
			w.WriteHeader(403)
			fmt.Fprint(w, `{"ok":false,"error_code":403,"description":"Forbidden: bot was kicked from the group chat"}`)
			return
		}
		b.mu.Lock()
		b.sent = append(b.sent, tgSent{chat: req.ChatID, text: req.Text})
		n := len(b.sent)
		b.mu.Unlock()
		fmt.Fprintf(w, `{"ok":true,"result":{"message_id":%d,"chat":{"id":%s,"type":"group"},"date":%d,"text":"..."}}`, n, req.ChatID, time.Now().Unix())
	case "/bot" + tgToken + "/getUpdates":
		var req struct {
			Offset  int64 `json:"offset"`
			Timeout int   `json:"timeout"`
		}
		if json.Unmarshal(body, &req) != nil {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"ok":false,"error_code":400,"description":"Bad Request: malformed getUpdates"}`)
			return
		}
		deadline := time.After(time.Duration(req.Timeout) * time.Second)
		for {
			b.mu.Lock()
			var out []map[string]any
			kept := b.queue[:0]
			for _, u := range b.queue {
				if int64(u["update_id"].(int)) >= req.Offset {
					kept = append(kept, u)
					out = append(out, u)
				}
			}
			b.queue = kept
			changed := b.changed
			b.mu.Unlock()
			if len(out) > 0 {
				json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": out})
				return
			}
			select {
			case <-changed:
			case <-deadline:
				fmt.Fprint(w, `{"ok":true,"result":[]}`)
				return
			case <-r.Context().Done():
				return
			}
		}
	default:
		w.WriteHeader(404)
		fmt.Fprint(w, `{"ok":false,"error_code":404,"description":"Not Found"}`)
	}
}

// push queues an update for getUpdates.
func (b *tgBot) push(u map[string]any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, u)
	close(b.changed)
	b.changed = make(chan struct{})
}

// messagesTo is what chat received, in plain text.
func (b *tgBot) messagesTo(chat int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.sent {
		if m.chat == strconv.FormatInt(chat, 10) {
			out = append(out, plainText(m.text))
		}
	}
	return out
}

func plainText(s string) string { return html.UnescapeString(tag.ReplaceAllString(s, "")) }

// tgUpdate is a text message as Telegram sends it, with fields the bot
// does not read.
func tgUpdate(id int, chat, user int64, username, text string) map[string]any {
	chatType := "group"
	if chat == user {
		chatType = "private"
	}
	return map[string]any{
		"update_id": id,
		"message": map[string]any{
			"message_id": id * 10,
			"from":       map[string]any{"id": user, "is_bot": false, "first_name": "Al", "username": username, "language_code": "en"},
			"chat":       map[string]any{"id": chat, "type": chatType, "title": "Ops"},
			"date":       time.Now().Unix(),
			"text":       text,
			"entities":   []map[string]any{{"offset": 0, "length": len(strings.Fields(text)[0]), "type": "bot_command"}},
		},
	}
}

type webhookAnswer struct {
	Success bool `json:"success"`
	Data    struct {
		UpdateID int64  `json:"update_id"`
		Outcome  string `json:"outcome"`
		Command  string `json:"command"`
	} `json:"data"`
	Error struct {
		Code    string `json:"code"`
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"error"`
}

// hook posts body to instance i's webhook with secret.
func (c *cluster) hook(i int, secret string, body []byte) (int, webhookAnswer) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.ins[i%len(c.ins)].base+"/api/v1/telegram/webhook", bytes.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var ans webhookAnswer
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(&ans))
	return resp.StatusCode, ans
}

// say posts a command as Telegram would and requires outcome.
func (c *cluster) say(u map[string]any, outcome string) {
	c.t.Helper()
	body, err := json.Marshal(u)
	require.NoError(c.t, err)
	status, ans := c.hook(u["update_id"].(int), tgHookSecret, body)
	require.Equal(c.t, http.StatusOK, status, "%+v", ans)
	require.Equal(c.t, outcome, ans.Data.Outcome)
}

// reply waits for the answer to update id to be delivered and returns it
// as chat received it.
func (c *cluster) reply(bot *tgBot, id int, chat int64) string {
	c.t.Helper()
	var text string
	c.eventually(fmt.Sprintf("the answer to update %d", id), func() bool {
		return c.pool.QueryRow(c.ctx, `SELECT text FROM telegram_outbox WHERE kind = 'telegram.reply' AND event_seq = $1 AND status = 'sent'`, id).Scan(&text) == nil
	})
	want := plainText(text)
	require.Contains(c.t, bot.messagesTo(chat), want)
	return want
}

// requireTelegramActor checks that the stream's last event of type typ was
// caused by the admin's Telegram user, in the log and, for a task, in its
// history as the API shows it.
func (c *cluster) requireTelegramActor(streamID, typ string) {
	c.t.Helper()
	var meta events.Meta
	require.NoError(c.t, c.pool.QueryRow(c.ctx, `SELECT meta FROM task_events WHERE stream_id = $1 AND type = $2
		ORDER BY seq DESC LIMIT 1`, streamID, typ).Scan(&meta))
	require.Equal(c.t, events.Actor{Kind: events.ActorTelegram, ID: "telegram:4242", Name: "@alice"}, meta.Actor)
	if !strings.HasPrefix(typ, "task.") {
		return
	}
	history, err := c.admin.TaskEvents(c.ctx, streamID)
	require.NoError(c.t, err)
	var found *client.Event
	for i := range history {
		if history[i].Type == typ {
			found = &history[i]
		}
	}
	require.NotNil(c.t, found, "no %s in the history of %s", typ, streamID)
	require.Equal(c.t, "@alice", found.Actor.Name)
	require.Equal(c.t, "telegram", string(found.Actor.Kind))
	require.Equal(c.t, meta.Actor, found.Meta.Actor)
}

func telegramCommandsCluster(t *testing.T, bot *tgBot, n int, extra ...string) *cluster {
	return newCluster(t, n, append([]string{"TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN=" + tgToken,
		"TELEGRAM_CHAT_ID=-100777", "TELEGRAM_API_BASE=" + bot.srv.URL, "TELEGRAM_WINDOW=200ms",
		"TELEGRAM_ALLOWED_CHAT_IDS=-100777", "TELEGRAM_ADMIN_USER_IDS=4242"}, extra...)...)
}

func TestTelegramCommandsWebhook(t *testing.T) {
	t.Parallel()
	bot := newTGBot(t)
	c := telegramCommandsCluster(t, bot, 2, "TELEGRAM_WEBHOOK_SECRET="+tgHookSecret)
	none := 0
	crawl, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crawl", MaxRetries: &none})
	require.NoError(t, err)
	_, err = c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "digest", MaxRetries: &none})
	require.NoError(t, err)
	w := c.worker("crawler", 1)
	failed, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "Crawl NVDA", TaskTypeID: crawl.ID, AssignedTo: w.id})
	require.NoError(t, err)
	c.claimAndFail(w, 0, failed.ID)
	waiting, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "Crawl <AMD> & co", TaskTypeID: crawl.ID})
	require.NoError(t, err)
	admin := func(id int, text string) map[string]any { return tgUpdate(id, tgTeamChat, tgAdmin, "alice", text) }

	// Access: a wrong or missing secret changes nothing.
	body, _ := json.Marshal(admin(1, "/pause crawl"))
	status, ans := c.hook(0, "wrong-secret", body)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "unauthenticated", ans.Error.Code)
	status, _ = c.hook(1, "", body)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Zero(t, c.count(`SELECT count(*) FROM telegram_updates`))

	// Not an Update: a 4xx naming what is wrong, nothing recorded.
	for _, bad := range []struct{ body, field string }{
		{`[1, 2]`, "body"},
		{`{"message": {"text": "/status"}}`, "update_id"},
		{`{"update_id": "seven"}`, "update_id"},
		{`{"update_id": 9, "message": {"text": "/status", "chat": {"type": "group"}}}`, "message.chat.id"},
		{`{"update_id": 9, "message": `, "body"},
	} {
		status, ans := c.hook(0, tgHookSecret, []byte(bad.body))
		require.Equal(t, http.StatusBadRequest, status, bad.body)
		require.Equal(t, bad.field, ans.Error.Field, "%s: %+v", bad.body, ans.Error)
	}
	big := admin(9, "/status "+strings.Repeat("x", 70<<10))
	body, _ = json.Marshal(big)
	status, _ = c.hook(0, tgHookSecret, body)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Zero(t, c.count(`SELECT count(*) FROM telegram_updates`))

	// A stranger's chat: a polite refusal to that chat, nothing changes.
	c.say(tgUpdate(10, -999, 777, "mallory", "/cancel "+waiting.ID), "refused")
	require.Contains(t, c.reply(bot, 10, -999), "Sorry, I only take commands from my team's chats")
	// Told once an hour: a stranger who keeps writing does not make the bot write.
	c.say(tgUpdate(13, -999, 777, "mallory", "/status"), "refused")
	require.Zero(t, c.count(`SELECT count(*) FROM telegram_outbox WHERE event_seq = 13`))
	// An admin in a group nobody allowed is refused too: the group would read the answers.
	c.say(tgUpdate(11, -998, tgAdmin, "alice", "/status"), "refused")
	// That group removed the bot: its answer is dead-lettered, and the
	// other chats' answers go on without waiting.
	c.eventually("the answer to the group without the bot to be dead-lettered", func() bool {
		return c.count(`SELECT count(*) FROM telegram_outbox WHERE event_seq = 11 AND status = 'dead'`) == 1
	})
	// A member of the team chat who is no admin may read, not change.
	c.say(tgUpdate(12, tgTeamChat, tgMember, "bob", "/cancel "+waiting.ID[:8]), "ran")
	require.Contains(t, c.reply(bot, 12, tgTeamChat), "Only an admin can /cancel")
	task, err := c.admin.Task(c.ctx, waiting.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, task.Status)

	// /help, and an unknown command gets it too.
	c.say(admin(20, "/help@ClawdBot"), "ran")
	help := c.reply(bot, 20, tgTeamChat)
	for _, cmd := range []string{"/status", "/task", "/add", "/pause", "/resume", "/retry", "/cancel", "/budget", "/help"} {
		require.Contains(t, help, cmd)
	}
	c.say(admin(21, "/frobnicate now"), "ran")
	require.Equal(t, "I don't know /frobnicate.\n\n"+help, c.reply(bot, 21, tgTeamChat))

	// /status: the queue, workers online, the last hour's failures.
	stats, err := c.admin.Stats(c.ctx)
	require.NoError(t, err)
	c.say(tgUpdate(22, tgTeamChat, tgMember, "bob", "/status"), "ran")
	require.Equal(t, fmt.Sprintf("📊 Queue: 1 waiting, 0 scheduled, 0 in progress\nWorkers online: %v of 1\nFailures in the last hour: 1",
		stats["workers_online"]), c.reply(bot, 22, tgTeamChat))

	// /task by an id prefix. Ids are UUIDv7: the first 12 digits are the
	// creation's millisecond, shared by tasks made together.
	c.say(admin(23, "/task "+failed.ID[:23]), "ran")
	require.Equal(t, "📋 Crawl NVDA\n"+failed.ID+"\ncrawl · failed · medium\ncreated "+failed.CreatedAt.UTC().Format(time.RFC3339)+
		"\nfailed: burst failure", c.reply(bot, 23, tgTeamChat))
	c.say(admin(24, "/task 0000"), "ran")
	require.Equal(t, "⚠️ task 0000 not found", c.reply(bot, 24, tgTeamChat))

	// /retry and /cancel: events whose actor is the Telegram user.
	c.say(admin(30, "/retry "+failed.ID[:23]+" try the mirror"), "ran")
	require.Contains(t, c.reply(bot, 30, tgTeamChat), "🔁 Retry created: Crawl NVDA (retry 1)")
	c.requireTelegramActor(failed.ID, "task.retried")
	c.say(admin(31, "/cancel "+waiting.ID), "ran")
	require.Equal(t, "🛑 Cancelled Crawl <AMD> & co.", c.reply(bot, 31, tgTeamChat))
	c.requireTelegramActor(waiting.ID, "task.cancelled")
	c.say(admin(32, "/cancel "+waiting.ID), "ran")
	require.Contains(t, c.reply(bot, 32, tgTeamChat), "⚠️ ")

	// /pause and /resume one type, in a private chat with the bot.
	private := func(id int, text string) map[string]any { return tgUpdate(id, tgAdmin, tgAdmin, "alice", text) }
	c.say(private(40, "/pause crawl upstream is down"), "ran")
	require.Equal(t, "⏸️ Paused crawl: its tasks wait until /resume crawl.", c.reply(bot, 40, tgAdmin))
	tt, err := c.admin.TaskType(c.ctx, crawl.ID)
	require.NoError(t, err)
	require.True(t, tt.Paused)
	require.Equal(t, "upstream is down", tt.PauseReason)
	require.Equal(t, "telegram:4242", tt.PausedBy)
	c.requireTelegramActor(crawl.ID, "task_type.paused")

	// The same update delivered again runs once: no second pause (which
	// would fail), no second answer.
	body, _ = json.Marshal(private(40, "/pause crawl upstream is down"))
	status, ans = c.hook(1, tgHookSecret, body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "duplicate", ans.Data.Outcome)
	require.Equal(t, 1, c.count(`SELECT count(*) FROM task_events WHERE stream_id = $1 AND type = 'task_type.paused'`, crawl.ID))
	require.Equal(t, 1, c.count(`SELECT count(*) FROM telegram_outbox WHERE kind = 'telegram.reply' AND event_seq = 40`))

	c.say(private(41, "/resume crawl"), "ran")
	require.Equal(t, "▶️ Resumed crawl.", c.reply(bot, 41, tgAdmin))
	c.requireTelegramActor(crawl.ID, "task_type.resumed")

	// Without a type: every type.
	c.say(admin(42, "/pause"), "ran")
	require.Equal(t, "⏸️ Paused 2 types: crawl, digest.", c.reply(bot, 42, tgTeamChat))
	c.say(admin(43, "/resume"), "ran")
	require.Equal(t, "▶️ Resumed 2 types: crawl, digest.", c.reply(bot, 43, tgTeamChat))
	c.say(admin(45, "/resume"), "ran")
	require.Equal(t, "No type is paused.", c.reply(bot, 45, tgTeamChat))
	c.say(admin(44, "/pause nosuchtype"), "ran")
	require.Equal(t, `⚠️ type: no task type has the alias or name "nosuchtype"`, c.reply(bot, 44, tgTeamChat))

	// /add: a task from the type's alias and params template.
	reddit, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "reddit_crawl", Label: "Reddit crawl", Alias: "reddit",
		ParamSchema:    json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string","pattern":"^[A-Z]+$"},"sort":{"type":"string"}},"required":["ticker"]}`),
		ParamsTemplate: json.RawMessage(`{"ticker": "{{key}}", "sort": "{{sort}}"}`)})
	require.NoError(t, err)
	c.say(admin(70, "/add reddit NVDA sort=new"), "ran")
	added := c.reply(bot, 70, tgTeamChat)
	require.True(t, strings.HasPrefix(added, "➕ Created Reddit crawl NVDA sort=new (medium)\n"), added)
	addedID := strings.TrimPrefix(added, "➕ Created Reddit crawl NVDA sort=new (medium)\n")
	task, err = c.admin.Task(c.ctx, addedID)
	require.NoError(t, err)
	require.Equal(t, reddit.ID, task.TaskTypeID)
	require.JSONEq(t, `{"ticker":"NVDA","sort":"new"}`, string(task.Params))
	c.requireTelegramActor(addedID, "task.created")
	// Bad /add: each answered with what is wrong, and no task made.
	tasksBefore := c.count(`SELECT count(*) FROM worker_tasks`)
	for i, bad := range []struct{ text, answer string }{
		{"/add", "⚠️ type: is missing: /add <type alias> <key or name=value…>, e.g. /add reddit NVDA"},
		{"/add nosuch NVDA", `⚠️ type: no task type has the alias or name "nosuch"`},
		{"/add reddit NVDA", "⚠️ params: no value for {{sort}} (the template wants key, sort)"},
		{"/add reddit nvda sort=new", "⚠️ params"},
		{"/add reddit NVDA AMD sort=new", "⚠️ params: key is given twice"},
		{"/add crawl NVDA", "⚠️ params_template: type crawl has no params template to make a task from; an admin sets one in the type's form"},
	} {
		c.say(admin(71+i, bad.text), "ran")
		require.True(t, strings.HasPrefix(c.reply(bot, 71+i, tgTeamChat), bad.answer), "%s: %s", bad.text, c.reply(bot, 71+i, tgTeamChat))
	}
	require.Equal(t, tasksBefore, c.count(`SELECT count(*) FROM worker_tasks`))
	// A member who is no admin cannot add.
	c.say(tgUpdate(80, tgTeamChat, tgMember, "bob", "/add reddit AMD sort=top"), "ran")
	require.Contains(t, c.reply(bot, 80, tgTeamChat), "Only an admin can /add")
	require.Equal(t, tasksBefore, c.count(`SELECT count(*) FROM worker_tasks`))

	// /budget: today's LLM usage per type, from the usage counters.
	c.say(admin(50, "/budget"), "ran")
	require.Equal(t, "💰 No LLM usage reported today, and no type has a budget.", c.reply(bot, 50, tgTeamChat))
	summarize, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "Summarize", TaskTypeID: crawl.ID, AssignedTo: w.id})
	require.NoError(t, err)
	require.NoError(t, w.do(0, func(cl *client.Client) error { _, err := cl.Claim(c.ctx); return err }))
	cost := 0.25
	require.NoError(t, w.do(0, func(cl *client.Client) error {
		_, err := cl.ReportUsage(c.ctx, summarize.ID, events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 1000, OutputTokens: 200, CostUSD: &cost})
		return err
	}))
	c.say(admin(51, "/budget"), "ran")
	require.Equal(t, "💰 LLM usage today ("+time.Now().UTC().Format(time.DateOnly)+")\ncrawl: 1200 tokens, $0.25", c.reply(bot, 51, tgTeamChat))

	// Plain talk is not a command: nothing to answer.
	c.say(admin(60, "good morning"), "ignored")
	require.Zero(t, c.count(`SELECT count(*) FROM telegram_outbox WHERE event_seq = 60`))

	// Every answer went out once, to the chat that asked (but the one the
	// group without the bot refused).
	require.Zero(t, c.count(`SELECT count(*) FROM telegram_outbox WHERE kind = 'telegram.reply' AND status <> 'sent' AND event_seq <> 11`))
	require.Len(t, bot.messagesTo(-999), 1)
}

// getUpdates without a public URL: one instance reads at a time; when it
// is killed another takes over, and what the dead one handled is not run
// again.
func TestTelegramCommandsPollTakeover(t *testing.T) {
	t.Parallel()
	bot := newTGBot(t)
	c := telegramCommandsCluster(t, bot, 2, "TELEGRAM_UPDATES=poll", "TELEGRAM_POLL_WAIT=1s", "TELEGRAM_POLL_RETRY=200ms")
	_, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crawl"})
	require.NoError(t, err)

	// The webhook is off in this mode.
	body, _ := json.Marshal(tgUpdate(1, tgTeamChat, tgAdmin, "alice", "/status"))
	status, _ := c.hook(0, tgHookSecret, body)
	require.Equal(t, http.StatusForbidden, status)

	bot.push(tgUpdate(100, tgTeamChat, tgAdmin, "alice", "/status"))
	require.Contains(t, c.reply(bot, 100, tgTeamChat), "📊 Queue:")

	holder := c.pollHolder()
	c.ins[holder].stop(syscall.SIGKILL)
	// Telegram hands out again what was not confirmed: the dead reader
	// confirmed nothing after 100, and 100 itself must not run twice.
	bot.push(tgUpdate(100, tgTeamChat, tgAdmin, "alice", "/status"))
	bot.push(tgUpdate(101, tgTeamChat, tgAdmin, "alice", "/pause crawl"))
	require.Equal(t, "⏸️ Paused crawl: its tasks wait until /resume crawl.", c.reply(bot, 101, tgTeamChat))
	require.Equal(t, 1-holder, c.pollHolder())
	require.Equal(t, 1, c.count(`SELECT count(*) FROM telegram_outbox WHERE kind = 'telegram.reply' AND event_seq = 100`))
	require.Equal(t, 2, c.count(`SELECT count(*) FROM telegram_updates`))
	require.Equal(t, 2, c.count(`SELECT count(*) FROM telegram_outbox WHERE kind = 'telegram.reply' AND status = 'sent'`))
}

// pollHolder is the instance whose connection holds the poller's lock.
func (c *cluster) pollHolder() int {
	c.t.Helper()
	var app string
	c.eventually("an instance to hold the poller's lock", func() bool {
		return c.pool.QueryRow(c.ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = 1 AND l.granted`, 0x74676d).Scan(&app) == nil
	})
	for i, in := range c.ins {
		in.mu.Lock()
		pid := in.cmd.Process.Pid
		in.mu.Unlock()
		if strings.Contains(app, fmt.Sprintf("-%d-", pid)) {
			return i
		}
	}
	c.t.Fatalf("no instance has the lock holder's name %q", app)
	return -1
}

// The handled updates kept for redeliveries are pruned by the service's
// housekeeping after a week, a batch at a time, but the newest is kept
// whatever its age: a getUpdates reader starts after it.
func TestHandledTelegramUpdatesArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO telegram_updates (update_id, outcome, received_at)
		SELECT n, 'ran', now() - interval '8 days' FROM generate_series(1, 1500) n
		UNION ALL SELECT 1550, 'ran', now() - interval '1 hour'
		UNION ALL SELECT 1600, 'ran', now() - interval '8 days'`)
	require.NoError(t, err)

	startServer(t, dbURL)
	kept := func() []int64 {
		rows, err := conn.Query(ctx, `SELECT update_id FROM telegram_updates ORDER BY update_id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return ids
	}
	require.Eventually(t, func() bool { return len(kept()) == 2 }, 30*time.Second, 50*time.Millisecond,
		"the week-old updates pruned at start")
	require.Equal(t, []int64{1550, 1600}, kept(), "the recent one, and the newest however old")
}
