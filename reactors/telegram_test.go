package reactors

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

const (
	testToken = "123456789:AAF-secret_Token-never-logged"
	testChat  = "-1001234567890"
)

// nastyTitle has every character that breaks a naive Markdown or HTML
// message, plus the ones MarkdownV2 reserves.
const nastyTitle = `Crawl *NVDA* _fast_ [r/wsb](x) <b>&amp; "q" 'a' \ ~ # + - = | { } . ! >`

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type tgEnv struct {
	pool *pgxpool.Pool
	db   *store.DB
	hub  *store.Hub
	bot  *fakeBot
	logs *syncBuffer
	cfg  TelegramConfig
}

func setupTelegram(t *testing.T) *tgEnv {
	t.Helper()
	pool := storetest.NewPool(t)
	hub := store.NewHub()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}, AfterCommit: hub.Wake})
	require.NoError(t, err)
	bot := newFakeBot(t, testToken, testChat)
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("outbox: %v; requests: %+v\nlogs:\n%s", countStatus(t, pool), bot.log(), logs.String())
		}
	})
	return &tgEnv{pool: pool, db: db, hub: hub, bot: bot, logs: logs, cfg: TelegramConfig{
		Enabled: true, Token: testToken, ChatID: testChat, APIBase: bot.srv.URL,
		Window: 30 * time.Millisecond, PollInterval: 50 * time.Millisecond, Lease: 5 * time.Second,
		HTTPTimeout: 500 * time.Millisecond, BackoffBase: 10 * time.Millisecond, BackoffMax: 80 * time.Millisecond,
		MessageGap: time.Millisecond,
		Logger:     zerolog.New(logs).With().Timestamp().Logger(),
	}}
}

// run starts a sender and stops it (and waits for it) when the test ends.
func (e *tgEnv) run(t *testing.T, cfg TelegramConfig) *TelegramSender {
	t.Helper()
	s, err := NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return s
}

// enqueue inserts n outbox rows "row <i> <tag>" created at `at`.
func enqueue(t *testing.T, q execer, from, n int, at time.Time, tag string) []string {
	t.Helper()
	rows := make([]outboxRow, n)
	plain := make([]string, n)
	for i := range rows {
		seq := int64(from + i)
		rows[i] = outboxRow{EventSeq: seq, Kind: "test", ChatID: testChat,
			Text: fmt.Sprintf("row %d %s", seq, bold(esc(tag, 100)))}
		plain[i] = fmt.Sprintf("row %d %s", seq, tag)
	}
	got, err := insertOutbox(context.Background(), q, rows, at)
	require.NoError(t, err)
	require.EqualValues(t, n, got)
	return plain
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func countStatus(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT status, count(*) FROM telegram_outbox GROUP BY status`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// deliveredLines counts every notification line the fake accepted (the
// batch headers left out).
func deliveredLines(msgs []fakeMessage) map[string]int {
	out := map[string]int{}
	for _, m := range msgs {
		for _, line := range strings.Split(m.Plain, "\n") {
			if strings.HasPrefix(line, "📬 ") {
				continue
			}
			out[line]++
		}
	}
	return out
}

// requireExactlyOnce: every expected line arrived once and nothing else did.
func requireExactlyOnce(t *testing.T, msgs []fakeMessage, want []string) {
	t.Helper()
	got := deliveredLines(msgs)
	for _, w := range want {
		require.Equal(t, 1, got[w], "line %q delivered %d times", w, got[w])
	}
	require.Len(t, got, len(want), "unexpected lines were delivered")
}

func TestEscapeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{nastyTitle, "a & b", "<<>>&&", "&amp;", "x < y > z", "emoji 🚀 ok", "tab\tand\nnewline", "中文标题"} {
		got, err := parseTelegramHTML(bold(esc(s, budgetTitle)))
		require.NoError(t, err, s)
		require.Equal(t, strings.Join(strings.Fields(s), " "), got)
	}
	// Cutting to a budget never splits an entity and always parses.
	long := strings.Repeat("&<>x", 500)
	cut := esc(long, 101)
	require.LessOrEqual(t, len(cut), 101)
	plain, err := parseTelegramHTML(cut)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(plain, "…")))
	require.True(t, strings.HasSuffix(plain, "…"))
}

func TestSummarizeResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`"847 posts"`, "847 posts"},
		{`{"summary":"847 posts collected","rows":[1,2]}`, "847 posts collected"},
		{`{"posts":847,"subreddits":["wsb","stocks"],"nested":{"a":1},"ok":true}`, "ok: true, posts: 847, subreddits: 2 items"},
		{`[1,2,3]`, "3 items"},
		{`null`, ""},
		{`12.5`, "12.5"},
	} {
		require.Equal(t, tc.want, summarizeResult(json.RawMessage(tc.in)), tc.in)
	}
	long := summarizeResult(json.RawMessage(`"` + strings.Repeat("é", 500) + `"`))
	require.Equal(t, 200, len([]rune(long)))
}

func TestComposeMessagesSplitsAtTheLimit(t *testing.T) {
	t.Parallel()
	var rows []outboxRow
	for i := range 40 {
		rows = append(rows, outboxRow{ID: int64(i), Text: fmt.Sprintf("%02d %s", i, strings.Repeat("&amp;", 60))})
	}
	chunks := composeMessages(rows)
	require.Greater(t, len(chunks), 1)
	n := 0
	for i, c := range chunks {
		require.LessOrEqual(t, len(c.text), telegramMaxMessage)
		require.Contains(t, c.text, fmt.Sprintf("40 updates</b> (%d/%d)", i+1, len(chunks)))
		for _, r := range c.rows {
			require.Equal(t, int64(n), r.ID, "rows keep their order across parts")
			n++
		}
	}
	require.Equal(t, 40, n)
}

// A digest claimed with other rows is still a message of its own.
func TestComposeMessagesSendsADigestAlone(t *testing.T) {
	t.Parallel()
	rows := []outboxRow{{ID: 1, Kind: kindFailed, Text: "failed"}, {ID: 2, Kind: kindDigest, Text: "digest\nof the day"},
		{ID: 3, Kind: kindCompleted, Text: "completed"}}
	chunks := composeMessages(rows)
	require.Len(t, chunks, 2)
	require.Equal(t, "digest\nof the day", chunks[0].text)
	require.Equal(t, []outboxRow{rows[1]}, chunks[0].rows)
	require.Equal(t, "📬 <b>2 updates</b>\nfailed\ncompleted", chunks[1].text)
	require.Len(t, composeMessages(rows[1:2]), 1)
}

// fixture is a task type, a worker and helpers that append real events.
type fixture struct {
	db       *store.DB
	typeID   string
	workerID string
	meta     events.Meta
}

func newFixture(t *testing.T, db *store.DB, maxRetries int, workerName string) *fixture {
	t.Helper()
	ctx := context.Background()
	meta := events.Meta{Actor: events.System("test")}
	tt, err := db.CreateTaskType(ctx, events.TaskTypeSpec{Name: fmt.Sprintf("crawl_%d", time.Now().UnixNano()),
		Label: "Crawl", ParamSchema: json.RawMessage(`{"type":"object"}`), MaxRetries: maxRetries}, meta)
	require.NoError(t, err)
	w, err := db.CreateUser(ctx, events.UserRegistered{Email: fmt.Sprintf("w%d@example.com", time.Now().UnixNano()),
		FullName: workerName, IsWorker: true, MaxConcurrentTasks: 10}, "password-123", "x", meta)
	require.NoError(t, err)
	return &fixture{db: db, typeID: tt.ID, workerID: w.ID, meta: meta}
}

func (f *fixture) task(t *testing.T, title string, retryCount int) string {
	t.Helper()
	tk, err := f.db.CreateTask(context.Background(), f.db.Pool(), store.NewTaskParams{
		NewTaskParams: events.NewTaskParams{Title: title, RetryCount: retryCount}, TaskTypeID: f.typeID}, f.meta)
	require.NoError(t, err)
	return tk.ID
}

func (f *fixture) do(t *testing.T, id string, decide store.TaskDecision) {
	t.Helper()
	_, _, err := f.db.UpdateTask(context.Background(), f.db.Pool(), id, f.meta, decide)
	require.NoError(t, err)
}

func (f *fixture) claim(t *testing.T, id string) {
	f.do(t, id, func(tk *events.Task) ([]events.Payload, error) { return tk.Claim(f.workerID) })
}

func (f *fixture) fail(t *testing.T, id, kind, reason string) {
	f.claim(t, id)
	f.do(t, id, func(tk *events.Task) ([]events.Payload, error) {
		if kind == events.FailureError {
			return tk.Fail(f.workerID, kind, reason, nil)
		}
		return tk.Fail("", kind, reason, nil)
	})
}

// handleAll feeds every event of the reactor's types on the given streams
// to its Handle in one transaction, as the runner does. It reads the streams
// rather than the consumer log: the log's horizon is cluster-wide, and a long
// transaction of some other test would hold these events back.
func handleAll(t *testing.T, db *store.DB, r Reactor, streams ...string) {
	t.Helper()
	ctx := context.Background()
	var evs []events.Envelope
	for _, id := range streams {
		stream, err := db.Stream(ctx, db.Pool(), id)
		require.NoError(t, err)
		for _, e := range stream {
			if slices.Contains(r.Types, e.Type) {
				evs = append(evs, e)
			}
		}
	}
	slices.SortFunc(evs, func(a, b events.Envelope) int { return cmp.Compare(a.Seq, b.Seq) })
	require.NoError(t, db.WithTx(ctx, func(tx pgx.Tx) error { return r.Handle(ctx, tx, evs) }))
}

type outboxLine struct {
	Kind   string
	Plain  string
	Urgent bool
}

func outboxLines(t *testing.T, pool *pgxpool.Pool) []outboxLine {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT kind, text, urgent FROM telegram_outbox ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxLine, error) {
		var l outboxLine
		var html string
		if err := r.Scan(&l.Kind, &html, &l.Urgent); err != nil {
			return l, err
		}
		var perr error
		l.Plain, perr = parseTelegramHTML(settleRetry(html, "")) // as sent alone
		return l, perr
	})
	require.NoError(t, err)
	return out
}

func TestTelegramReactorTexts(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	f := newFixture(t, e.db, 3, "Genesis <bot> & co")

	done := f.task(t, nastyTitle, 0)
	f.claim(t, done)
	f.do(t, done, func(tk *events.Task) ([]events.Payload, error) {
		return tk.PostResult(f.workerID, json.RawMessage(`{"summary":"847 posts <collected> & stored"}`))
	})
	for i, size := range []int64{3_000_000, 100_000} {
		f.do(t, done, func(tk *events.Task) ([]events.Payload, error) {
			name := fmt.Sprintf("part%d.jsonl", i)
			return tk.UploadData(events.TaskDataUploaded{DataID: uuid.Must(uuid.NewV7()).String(), DataType: "posts", Filename: name,
				Key: events.DataKey(tk.ID, "posts", name), Size: size, SHA256: strings.Repeat("0", 64), ContentType: "application/x-ndjson", WorkerID: f.workerID})
		})
	}
	f.do(t, done, func(tk *events.Task) ([]events.Payload, error) { return tk.Complete(f.workerID) })

	failed := f.task(t, "Reddit Crawl for NVDA", 0)
	f.fail(t, failed, events.FailureError, "HTTP 429 from <api> & friends.")
	f.do(t, failed, func(tk *events.Task) ([]events.Payload, error) {
		return tk.Retried(events.TaskRetried{RetryTaskID: "00000000-0000-0000-0000-000000000001", RetryNumber: 1,
			MaxRetries: 3, Hint: "Use longer delays."})
	})

	stuck := f.task(t, "Reddit Crawl for TSLA", 0)
	f.fail(t, stuck, events.FailureWorkerOffline, "Worker went offline during execution")

	last := f.task(t, "Reddit Crawl for AMD (retry 3)", 3)
	f.fail(t, last, events.FailureError, "still broken")
	f.do(t, last, func(tk *events.Task) ([]events.Payload, error) { return tk.RetriesExhausted(3) })

	skipped := f.task(t, "Reddit Crawl for XYZZ", 0)
	f.fail(t, skipped, events.FailureError, "no posts found")
	f.do(t, skipped, func(tk *events.Task) ([]events.Payload, error) {
		return tk.RetrySkipped("No data found for XYZZ — is this a valid ticker?")
	})

	oneShot := f.task(t, "One-shot export", 0)
	f.fail(t, oneShot, events.FailureError, "disk full")
	f.do(t, oneShot, func(tk *events.Task) ([]events.Payload, error) { return tk.RetriesExhausted(0) })

	// Not decided yet when the line is written: an error may still be
	// skipped by the advisor; a timeout is retried.
	undecided := f.task(t, "Reddit Crawl for META", 0)
	f.fail(t, undecided, events.FailureError, "HTTP 500")
	timedOut := f.task(t, "Reddit Crawl for MSFT", 0)
	f.fail(t, timedOut, events.FailureTimeout, "ran past 30 min")

	_, err := e.db.Heartbeat(ctx, f.workerID, store.HeartbeatParams{Status: "busy"}, f.meta)
	require.NoError(t, err)
	f.claim(t, f.task(t, "still running", 0))
	ok, err := e.db.MarkWorkerOffline(ctx, f.workerID, 0, f.meta)
	require.NoError(t, err)
	require.True(t, ok)

	r := NewTelegramReactor(e.cfg)
	require.Equal(t, "telegram", r.Name)
	streams := []string{done, failed, stuck, last, skipped, oneShot, undecided, timedOut, f.workerID}
	handleAll(t, e.db, r, streams...)
	want := []outboxLine{
		{kindCompleted, "✅ " + nastyTitle + " completed by Genesis <bot> & co. 847 posts <collected> & stored, 2 files, 3.1 MB", false},
		{kindFailed, "❌ Reddit Crawl for NVDA failed. Reason: HTTP 429 from <api> & friends. Retry: created (#00000000-0000-0000-0000-000000000001)", false},
		{kindRetried, "🔁 Retry 1/3: Reddit Crawl for NVDA back in queue. Hint: Use longer delays.", false},
		{kindFailed, "🧊 Reddit Crawl for TSLA stuck — Genesis <bot> & co offline. Returning to queue.", false},
		{kindFailed, "❌ Reddit Crawl for AMD (retry 3) failed. Reason: still broken. Retry: exhausted", false},
		{kindExhausted, "🚨 Reddit Crawl for AMD failed after 4 attempts. Needs human attention.", true},
		{kindFailed, "❌ Reddit Crawl for XYZZ failed. Reason: no posts found. Retry: skipped", false},
		{kindRetrySkipped, "⚠️ Reddit Crawl for XYZZ will not be retried: No data found for XYZZ — is this a valid ticker?", true},
		{kindFailed, "❌ One-shot export failed. Reason: disk full. Retry: exhausted", false},
		{kindExhausted, "🚨 One-shot export failed after 1 attempt. Needs human attention.", true},
		{kindFailed, "❌ Reddit Crawl for META failed. Reason: HTTP 500. Retry: pending", false},
		{kindFailed, "❌ Reddit Crawl for MSFT failed. Reason: ran past 30 min. Retry: yes", false},
		{kindWentOffline, "📴 Genesis <bot> & co went offline with 1 task in progress", false},
	}
	require.Equal(t, want, outboxLines(t, e.pool))

	// Handling the same events again (a checkpoint reset, a replay) adds
	// nothing: rows are unique per event and kind.
	handleAll(t, e.db, r, streams...)
	require.Len(t, outboxLines(t, e.pool), len(want))
}

// TestTelegramBatchSettlesRetries: failure lines written before the retry
// reactor decided go out with the decision that later rows of the same
// batch report (a retry created, skipped, exhausted), and the batch is in
// time order, each urgent line after the failure it follows; a failure
// whose decision is not in the batch still says "pending".
func TestTelegramBatchSettlesRetries(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	f := newFixture(t, e.db, 1, "Genesis")
	r := NewTelegramReactor(e.cfg)
	retried, skipped, exhausted, undecided := f.task(t, "Crawl NVDA", 0), f.task(t, "Crawl XYZZ", 0),
		f.task(t, "Crawl AMD (retry 1)", 1), f.task(t, "Crawl META", 0)
	for _, id := range []string{retried, skipped, exhausted, undecided} {
		f.fail(t, id, events.FailureError, "HTTP 500")
	}
	handleAll(t, e.db, r, retried, skipped, exhausted, undecided) // before any decision
	retryID := uuid.Must(uuid.NewV7()).String()
	f.do(t, retried, func(tk *events.Task) ([]events.Payload, error) {
		return tk.Retried(events.TaskRetried{RetryTaskID: retryID, RetryNumber: 1, MaxRetries: 1})
	})
	f.do(t, skipped, func(tk *events.Task) ([]events.Payload, error) { return tk.RetrySkipped("No such ticker.") })
	f.do(t, exhausted, func(tk *events.Task) ([]events.Payload, error) { return tk.RetriesExhausted(1) })
	handleAll(t, e.db, r, retried, skipped, exhausted, undecided)

	clock := &fakeClock{}
	clock.Set(time.Now().Add(time.Minute)) // the window has passed
	cfg := e.cfg
	cfg.Now = clock.Now
	s, err := NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)
	_, err = s.step(ctx)
	require.NoError(t, err)
	msgs := e.bot.messages()
	require.Len(t, msgs, 1)
	require.Equal(t, strings.Join([]string{
		"📬 7 updates",
		"❌ Crawl NVDA failed. Reason: HTTP 500. Retry: created (#" + retryID + ")",
		"❌ Crawl XYZZ failed. Reason: HTTP 500. Retry: skipped",
		"❌ Crawl AMD (retry 1) failed. Reason: HTTP 500. Retry: exhausted",
		"❌ Crawl META failed. Reason: HTTP 500. Retry: pending",
		"🔁 Retry 1/1: Crawl NVDA back in queue.",
		"⚠️ Crawl XYZZ will not be retried: No such ticker.",
		"🚨 Crawl AMD failed after 2 attempts. Needs human attention.",
	}, "\n"), msgs[0].Plain)
}

func TestTelegramKillSwitch(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	f := newFixture(t, e.db, 3, "Nexus")
	id := f.task(t, "ignored", 0)
	f.fail(t, id, events.FailureError, "boom")

	off := e.cfg
	off.Enabled = false
	handleAll(t, e.db, NewTelegramReactor(off), id)
	require.Empty(t, outboxLines(t, e.pool), "disabled: the reactor records nothing")

	// Rows already in the outbox stay unsent while disabled.
	enqueue(t, e.pool, 1, 3, time.Now().Add(-time.Hour), "old")
	s, err := NewTelegramSender(e.pool, e.hub, off)
	require.NoError(t, err)
	require.NoError(t, s.Run(context.Background()), "disabled: Run returns at once")
	require.Empty(t, e.bot.log())
	require.Equal(t, map[string]int{"pending": 3}, countStatus(t, e.pool))

	// Enabled without credentials is a configuration error, not a silent no-op.
	bad := e.cfg
	bad.Token = ""
	_, err = NewTelegramSender(e.pool, e.hub, bad)
	require.ErrorContains(t, err, "TELEGRAM_BOT_TOKEN")
}

// fakeClock is a settable clock for tests of the window.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestTelegramBatchingWindow(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	clock := &fakeClock{}
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clock.Set(start)
	cfg := e.cfg
	cfg.Window, cfg.Now = 5*time.Second, clock.Now
	s, err := NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)

	a := enqueue(t, e.pool, 1, 1, clock.Now(), "first")
	next, err := s.step(ctx)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, next, "the sender waits for the window of the oldest row")
	require.Empty(t, e.bot.log())

	clock.Advance(3 * time.Second)
	b := enqueue(t, e.pool, 2, 2, clock.Now(), "second")
	next, err = s.step(ctx)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, next, "a later row does not restart the window")
	require.Empty(t, e.bot.log())

	clock.Advance(2 * time.Second)
	_, err = s.step(ctx)
	require.NoError(t, err)
	msgs := e.bot.messages()
	require.Len(t, msgs, 1, "three rows in one window: one message")
	require.True(t, strings.HasPrefix(msgs[0].Plain, "📬 3 updates\n"), msgs[0].Plain)
	requireExactlyOnce(t, msgs, append(a, b...))
	require.Equal(t, map[string]int{"sent": 3}, countStatus(t, e.pool))

	// A lone row goes out as its own line, without a header.
	c := enqueue(t, e.pool, 10, 1, clock.Now(), "alone")
	clock.Advance(5 * time.Second)
	_, err = s.step(ctx)
	require.NoError(t, err)
	msgs = e.bot.messages()
	require.Len(t, msgs, 2)
	require.Equal(t, c[0], msgs[1].Plain)

	// An urgent row does not wait for the window, and takes what is due along.
	d := enqueue(t, e.pool, 20, 1, clock.Now(), "normal")
	_, err = insertOutbox(ctx, e.pool, []outboxRow{{EventSeq: 21, Kind: kindExhausted, ChatID: testChat,
		Text: "🚨 urgent", Urgent: true}}, clock.Now())
	require.NoError(t, err)
	_, err = s.step(ctx)
	require.NoError(t, err)
	msgs = e.bot.messages()
	require.Len(t, msgs, 3)
	require.Equal(t, "📬 2 updates\n"+d[0]+"\n🚨 urgent", msgs[2].Plain, "in time order: urgent only skips the window")

	// A full batch does not wait either.
	cfg.MaxBatch = 4
	s, err = NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)
	enqueue(t, e.pool, 30, 4, clock.Now(), "full")
	_, err = s.step(ctx)
	require.NoError(t, err)
	require.Len(t, e.bot.messages(), 4)
}

func TestTelegramRecoversFrom500And429(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	// Requests 0-3: 500; 4: a slow answer the client gives up on; 5: 429
	// retry after 1 s; 6: a 502 with an HTML body; 7: 500; then healthy.
	e.bot.setScript(func(n int) fakeAnswer {
		switch {
		case n < 4 || n == 7:
			return fakeAnswer{status: 500}
		case n == 6: // a proxy's page, not the Bot API's JSON
			return fakeAnswer{status: 502, body: "<html><body>502 Bad Gateway</body></html>"}
		case n == 4:
			return fakeAnswer{delay: 5 * time.Second}
		case n == 5:
			return fakeAnswer{status: 429, retryAfter: 1}
		}
		return fakeAnswer{}
	})
	want := enqueue(t, e.pool, 1, 30, time.Now(), "burst <&>")
	cfg := e.cfg
	cfg.MaxBatch = 7
	e.run(t, cfg)
	waitFor(t, 20*time.Second, "every row sent", func() bool { return countStatus(t, e.pool)["sent"] == 30 })
	requireExactlyOnce(t, e.bot.messages(), want)

	log := e.bot.log()
	require.Greater(t, len(log), 8)
	require.Equal(t, -1, log[4].Status, "the slow answer: the client gave up")
	require.Equal(t, 429, log[5].Status)
	require.GreaterOrEqual(t, log[6].At.Sub(log[5].At), time.Second, "nothing is sent before retry_after has passed")
	for i := 1; i < 4; i++ {
		require.Greater(t, log[i].At.Sub(log[i-1].At), cfg.BackoffBase/2-time.Millisecond, "backs off between failures")
	}

	var attempts, maxAttempts int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT sum(attempts), max(attempts) FROM telegram_outbox`).Scan(&attempts, &maxAttempts))
	require.Greater(t, maxAttempts, 1, "some rows were tried more than once")
	require.NotContains(t, e.logs.String(), testToken)
}

func TestTelegramDeadLettersA400(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	good := enqueue(t, e.pool, 1, 2, time.Now(), "good")
	// A row Telegram cannot parse (this cannot come from our escaping).
	_, err := insertOutbox(ctx, e.pool, []outboxRow{{EventSeq: 3, Kind: "test", ChatID: testChat,
		Text: "<blink>bad</blink>"}}, time.Now())
	require.NoError(t, err)
	more := enqueue(t, e.pool, 4, 2, time.Now(), "also good")
	s := e.run(t, e.cfg)
	_ = s
	waitFor(t, 10*time.Second, "all rows settled", func() bool {
		c := countStatus(t, e.pool)
		return c["sent"] == 4 && c["dead"] == 1
	})
	requireExactlyOnce(t, e.bot.messages(), append(good, more...))
	var desc string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT last_error FROM telegram_outbox WHERE status = 'dead'`).Scan(&desc))
	require.Contains(t, desc, "Bad Request: can't parse entities")
	require.Contains(t, e.logs.String(), "dead-lettered")
}

// A 400 about the chat (not about one message) dead-letters nothing: the rows
// wait until the configuration is fixed, then go to the configured chat.
func TestTelegramWrongChatKeepsRows(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	want := enqueue(t, e.pool, 1, 3, time.Now().Add(-time.Minute), "kept")
	wrong := e.cfg
	wrong.ChatID = "-100999"
	s, err := NewTelegramSender(e.pool, e.hub, wrong)
	require.NoError(t, err)
	_, err = s.step(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pending": 3}, countStatus(t, e.pool))
	require.Contains(t, e.logs.String(), "chat not found")

	_, err = e.pool.Exec(ctx, `UPDATE telegram_outbox SET next_attempt_at = now() - interval '1 second'`)
	require.NoError(t, err)
	s, err = NewTelegramSender(e.pool, e.hub, e.cfg)
	require.NoError(t, err)
	_, err = s.step(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"sent": 3}, countStatus(t, e.pool))
	requireExactlyOnce(t, e.bot.messages(), want)
}

func TestTelegramConcurrentSendersNoDuplicates(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	// A little latency so the senders really overlap.
	e.bot.setScript(func(n int) fakeAnswer { return fakeAnswer{delay: time.Duration(n%3) * time.Millisecond} })
	cfg := e.cfg
	cfg.MaxBatch = 5
	cfg.Window = time.Millisecond
	for range 3 {
		e.run(t, cfg)
	}
	var want []string
	for i := range 10 { // rows keep arriving while the senders run
		want = append(want, enqueue(t, e.pool, 1+i*20, 20, time.Now(), "concurrent")...)
		e.hub.Wake()
	}
	waitFor(t, 20*time.Second, "every row sent", func() bool { return countStatus(t, e.pool)["sent"] == len(want) })
	requireExactlyOnce(t, e.bot.messages(), want)
	var batches int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT batch_id) FROM telegram_outbox`).Scan(&batches))
	require.Greater(t, batches, 1)
}

func TestTelegramNeverLogsTheToken(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	enqueue(t, e.pool, 1, 1, time.Now().Add(-time.Minute), "x")

	// A network error: net/http puts the whole URL, token included, in it.
	dead := newFakeBot(t, testToken, testChat)
	dead.srv.Close()
	cfg := e.cfg
	cfg.APIBase = dead.srv.URL
	s, err := NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)
	_, err = s.step(ctx)
	require.NoError(t, err)
	var lastErr string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT last_error FROM telegram_outbox`).Scan(&lastErr))
	require.Contains(t, lastErr, "/bot<token>/sendMessage")
	require.NotContains(t, lastErr, testToken)

	// A wrong token: Telegram answers 404; the rows stay pending.
	cfg.APIBase = e.bot.srv.URL
	cfg.Token = testToken + "x"
	s, err = NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE telegram_outbox SET next_attempt_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	_, err = s.step(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pending": 1}, countStatus(t, e.pool))

	logs := e.logs.String()
	require.Contains(t, logs, "telegram send failed")
	require.Contains(t, logs, "check TELEGRAM_BOT_TOKEN")
	require.NotContains(t, logs, testToken)
}

func TestTelegramWaitingTasks(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	clock := &fakeClock{}
	clock.Set(time.Now().Add(-40 * time.Minute))
	db, err := store.New(e.pool, store.Config{Projector: projections.Projector{}, Now: clock.Now})
	require.NoError(t, err)
	f := newFixture(t, db, 3, "Nexus")
	old := f.task(t, "Old <queued> task", 0)
	assigned := f.task(t, "Waiting for its assignee", 0)
	_, err = db.AssignTask(ctx, db.Pool(), assigned, f.workerID, "", f.meta)
	require.NoError(t, err)
	clock.Set(time.Now())
	f.task(t, "Fresh task", 0)

	s, err := NewTelegramSender(e.pool, e.hub, e.cfg)
	require.NoError(t, err)
	n, err := s.checkWaiting(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	lines := outboxLines(t, e.pool)
	require.Len(t, lines, 1)
	require.Equal(t, kindWaiting, lines[0].Kind)
	require.Equal(t, "⏳ Old <queued> task waiting 40 min for a worker (no worker online).", lines[0].Plain)

	// Idempotent: looking again (from any instance) adds nothing.
	n, err = s.checkWaiting(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// Claimed and released back into the queue, it may be reported again
	// once it has waited long enough again.
	f.claim(t, old)
	f.do(t, old, func(tk *events.Task) ([]events.Payload, error) { return tk.Release(f.workerID, "") })
	later := e.cfg
	later.Now = func() time.Time { return time.Now().Add(31 * time.Minute) }
	s2, err := NewTelegramSender(e.pool, e.hub, later)
	require.NoError(t, err)
	n, err = s2.checkWaiting(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the released task and the fresh one (now 31 min old)")
}

// A look reads only the head of the queue (WaitingScan tasks of each
// priority): behind a head already reported, the backlog waits its turn.
func TestTelegramWaitingReadsOnlyTheHead(t *testing.T) {
	e := setupTelegram(t)
	ctx := context.Background()
	clock := &fakeClock{}
	clock.Set(time.Now().Add(-40 * time.Minute))
	db, err := store.New(e.pool, store.Config{Projector: projections.Projector{}, Now: clock.Now})
	require.NoError(t, err)
	f := newFixture(t, db, 3, "Nexus")
	var queued []string
	for i := range 5 {
		clock.Set(time.Now().Add(time.Duration(i-40) * time.Minute))
		queued = append(queued, f.task(t, fmt.Sprintf("Queued %d", i), 0))
	}
	cfg := e.cfg
	cfg.WaitingScan = 2
	s, err := NewTelegramSender(e.pool, e.hub, cfg)
	require.NoError(t, err)
	look := func() []string {
		t.Helper()
		_, err := s.checkWaiting(ctx)
		require.NoError(t, err)
		var titles []string
		for _, l := range outboxLines(t, e.pool) {
			titles = append(titles, strings.SplitN(strings.TrimPrefix(l.Plain, "⏳ "), " waiting", 2)[0])
		}
		return titles
	}
	require.Equal(t, []string{"Queued 0", "Queued 1"}, look(), "the head, oldest first")
	require.Equal(t, []string{"Queued 0", "Queued 1"}, look(), "nothing behind a head already reported")
	f.claim(t, queued[0])
	require.Equal(t, []string{"Queued 0", "Queued 1", "Queued 2"}, look(), "the head moved on")
}

// The waiting line says how long in units that fit: never "0 min".
func TestWaitingLineTexts(t *testing.T) {
	now := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		45 * time.Second: "⏳ <b>Crawl</b> waiting 45 s for a worker (no worker online).",
		40 * time.Minute: "⏳ <b>Crawl</b> waiting 40 min for a worker (no worker online).",
		2 * time.Hour:    "⏳ <b>Crawl</b> waiting 2 h for a worker (no worker online).",
		2*time.Hour + 5*time.Minute + 9*time.Second: "⏳ <b>Crawl</b> waiting 2 h 5 min for a worker (no worker online).",
	} {
		require.Equal(t, want, waitingLine(waitingTask{Title: "Crawl", Since: now.Add(-d)}, now))
	}
	require.Equal(t, "⏳ <b>Crawl</b> waiting 1 min for a worker (2 workers online, none claimed it).",
		waitingLine(waitingTask{Title: "Crawl", Since: now.Add(-time.Minute), Online: 2}, now))
}

// TestTelegramEndToEnd runs the real runner with the telegram reactor and a
// sender woken through the hub: a completed task with a nasty title arrives
// intact, once.
func TestTelegramEndToEnd(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	cfg := e.cfg
	cfg.PollInterval = time.Minute // only the hub can wake it in time
	sender := e.run(t, cfg)
	cfg.OnEnqueue = sender.Poke
	runner, err := NewRunner(RunnerConfig{DB: e.db, Hub: e.hub, InstanceID: "test",
		Reactors: []Reactor{NewTelegramReactor(cfg)}, CatchUp: 100 * time.Millisecond, Logger: zerolog.New(e.logs).With().Timestamp().Logger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = runner.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })

	f := newFixture(t, e.db, 3, "Nexus")
	id := f.task(t, nastyTitle+" (retry 1)", 1)
	f.claim(t, id)
	f.do(t, id, func(tk *events.Task) ([]events.Payload, error) {
		return tk.PostResult(f.workerID, json.RawMessage(`"847 posts"`))
	})
	f.do(t, id, func(tk *events.Task) ([]events.Payload, error) { return tk.Complete(f.workerID) })

	// Generous: the consumer horizon is cluster-wide, so a long transaction
	// anywhere on the test server delays the runner (DESIGN §2).
	waitFor(t, time.Minute, "the completion notice", func() bool { return len(e.bot.messages()) == 1 })
	require.Equal(t, "✅ "+nastyTitle+" (retry 1) completed by Nexus. 847 posts", e.bot.messages()[0].Plain)
}

func TestBotAPIClassifiesAnswers(t *testing.T) {
	t.Parallel()
	bot := newFakeBot(t, testToken, testChat)
	api := &botAPI{base: bot.srv.URL, token: testToken, client: &http.Client{Timeout: time.Second}}
	for _, tc := range []struct {
		name    string
		answer  fakeAnswer
		chat    string
		text    string
		outcome sendOutcome
		after   time.Duration
		desc    string
	}{
		{name: "ok", text: "<b>hi</b>", outcome: sendOK},
		{name: "ok with a body that is not JSON", answer: fakeAnswer{status: 200, body: "ok!"}, outcome: sendOK},
		{name: "429 with retry_after", answer: fakeAnswer{status: 429, retryAfter: 3}, outcome: sendRetryAfter, after: 3 * time.Second, desc: "Too Many Requests: retry after 3"},
		{name: "429 without parameters", answer: fakeAnswer{status: 429, body: `{"ok":false,"error_code":429,"description":"Too Many Requests"}`}, outcome: sendTransient},
		{name: "500", answer: fakeAnswer{status: 500}, outcome: sendTransient, desc: "Internal Server Error"},
		{name: "502 from a proxy", answer: fakeAnswer{status: 502, body: "<html>Bad Gateway</html>"}, outcome: sendTransient, desc: "HTTP 502 <html>Bad Gateway</html>"},
		{name: "400 about the message", text: "<blink>x</blink>", outcome: sendRejected, desc: "Bad Request: can't parse entities"},
		{name: "400 about the chat", chat: "-1", text: "x", outcome: sendRefused, desc: "Bad Request: chat not found"},
		{name: "401", answer: fakeAnswer{status: 401, body: `{"ok":false,"error_code":401,"description":"Unauthorized"}`}, outcome: sendRefused, desc: "Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Subtests run one after another, so the script can be swapped.
			bot.setScript(func(int) fakeAnswer { return tc.answer })
			chat, text := cmp.Or(tc.chat, testChat), cmp.Or(tc.text, "x")
			res := api.sendMessage(context.Background(), chat, text)
			require.Equal(t, tc.outcome, res.outcome, res.description)
			require.Equal(t, tc.after, res.retryAfter)
			require.Contains(t, res.description, tc.desc)
		})
	}

	wrongToken := &botAPI{base: bot.srv.URL, token: "1:wrong", client: http.DefaultClient}
	bot.setScript(nil)
	require.Equal(t, sendRefused, wrongToken.sendMessage(context.Background(), testChat, "x").outcome)

	down := newFakeBot(t, testToken, testChat)
	down.srv.Close()
	gone := &botAPI{base: down.srv.URL, token: testToken, client: http.DefaultClient}
	res := gone.sendMessage(context.Background(), testChat, "x")
	require.Equal(t, sendTransient, res.outcome)
	require.NotContains(t, res.description, testToken)
	require.Contains(t, res.description, "connection refused")
}

// The horizon stall alert names the blocker (escaped) and how long it has
// been open.
func TestStallLineText(t *testing.T) {
	start := time.Date(2026, 11, 24, 3, 40, 31, 0, time.UTC)
	b := &store.HorizonBlocker{PID: 4640, Database: "reports<&>", Application: "nightly-report", XactStart: start,
		Age: 6*time.Minute + 5*time.Second}
	require.Equal(t, "🐢 Consumers stalled: a transaction open for 6 min holds back every retry and notification "+
		"(pid 4640, database reports&lt;&amp;&gt;, nightly-report, started 03:40:31 UTC). End it or see docs/ops/horizon.md.",
		stallLine(b))
	b.Application = ""
	require.Contains(t, stallLine(b), ", no application name, ")
}
