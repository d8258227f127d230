package reactors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
)

// Telegram notifications (DESIGN §5, ADR docs/adr/004-telegram-outbox.md).
//
// The reactor turns events into telegram_outbox rows inside the runner's
// transaction, keyed UNIQUE (event_seq, kind), so a replayed batch inserts
// nothing twice. The sender (telegram_sender.go) claims due rows, batches
// them into one message per window, sends outside any transaction, and marks
// them. The waiting check (telegram_waiting.go) adds rows for tasks nobody
// claimed for a long time, keyed by the event that queued the task.

// TelegramConfig configures the reactor and the sender. Zero values get the
// defaults below; Validate says what is missing.
type TelegramConfig struct {
	// Enabled is the kill switch: false records nothing and sends nothing.
	Enabled bool
	Token   string // bot token; never logged
	ChatID  string
	APIBase string // default https://api.telegram.org

	Window       time.Duration // batching window (default 5 s)
	MaxBatch     int           // rows per message batch, at most (default 50)
	PollInterval time.Duration // slow catch-up ticker (default 2 s)
	Lease        time.Duration // how long a claimed batch is ours (default 1 min)
	HTTPTimeout  time.Duration // one sendMessage call (default 15 s)
	BackoffBase  time.Duration // first delay after a 5xx or network error (default 1 s)
	BackoffMax   time.Duration // longest such delay (default 5 min)
	MessageGap   time.Duration // least time between two messages of one instance (default 1 s)

	WaitingAfter      time.Duration // a queued task unclaimed this long is reported (default 30 min)
	WaitingCheckEvery time.Duration // how often to look for such tasks (default 1 min)
	WaitingScan       int           // tasks of each priority a look reads: the queue's head (default 100)

	// OnEnqueue runs inside the reactor's transaction after it inserted rows;
	// wire it to TelegramSender.Poke so the sender looks at the outbox on the
	// hub wake that follows the commit instead of waiting for its ticker.
	OnEnqueue func()

	Now        func() time.Time // clock (default time.Now)
	HTTPClient *http.Client     // default: a client with HTTPTimeout
	Logger     zerolog.Logger
	// Registerer receives the sender's metrics; none when nil.
	Registerer prometheus.Registerer
}

// withDefaults fills zero values.
func (c TelegramConfig) withDefaults() TelegramConfig {
	if c.APIBase == "" {
		c.APIBase = "https://api.telegram.org"
	}
	c.APIBase = strings.TrimRight(c.APIBase, "/")
	setDur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setDur(&c.Window, 5*time.Second)
	setDur(&c.PollInterval, 2*time.Second)
	setDur(&c.Lease, time.Minute)
	setDur(&c.HTTPTimeout, 15*time.Second)
	setDur(&c.BackoffBase, time.Second)
	setDur(&c.BackoffMax, 5*time.Minute)
	setDur(&c.MessageGap, time.Second)
	setDur(&c.WaitingAfter, 30*time.Minute)
	setDur(&c.WaitingCheckEvery, time.Minute)
	if c.MaxBatch <= 0 {
		c.MaxBatch = 50
	}
	if c.WaitingScan <= 0 {
		c.WaitingScan = 100
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.HTTPTimeout}
	}
	return c
}

// Validate reports a configuration that cannot work. A disabled config is
// always valid.
func (c TelegramConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	if c.Token == "" || c.ChatID == "" {
		return errors.New("telegram is enabled but TELEGRAM_BOT_TOKEN or TELEGRAM_CHAT_ID is empty " +
			"(set both, or TELEGRAM_ENABLED=false)")
	}
	if u, err := url.Parse(c.APIBase); c.APIBase != "" && (err != nil || u.Scheme == "" || u.Host == "") {
		return fmt.Errorf("TELEGRAM_API_BASE %q is not an absolute URL", c.APIBase)
	}
	if c.Lease > 0 && c.HTTPTimeout > 0 && c.HTTPTimeout*2 >= c.Lease {
		return errors.New("telegram: the lease must be more than twice the HTTP timeout, or a slow send outlives its claim")
	}
	return nil
}

// Outbox kinds: the event type that caused the row, or taskWaiting.
const (
	kindCompleted     = "task.completed"
	kindFailed        = "task.failed"
	kindRetried       = "task.retried"
	kindExhausted     = "task.retries_exhausted"
	kindRetrySkipped  = "task.retry_skipped"
	kindWentOffline   = "worker.went_offline"
	kindWaiting       = "task.waiting"    // synthetic: see telegram_waiting.go
	kindSchedulePause = "schedule.paused" // only the automatic pause is announced
	kindFireFailed    = "schedule.fire_failed"
	kindTypePaused    = "task_type.paused"
	kindTypeResumed   = "task_type.resumed"
	kindHorizonStall  = "horizon.stall" // synthetic, keyed by minus the blocker's start: see monitor.go
	telegramReactorID = "telegram"
)

// telegramEventTypes are the events the reactor turns into notifications.
var telegramEventTypes = []string{kindCompleted, kindFailed, kindRetried, kindExhausted, kindRetrySkipped, kindWentOffline,
	kindSchedulePause, kindFireFailed, kindTypePaused, kindTypeResumed}

// outboxRow is one notification line on its way to Telegram.
type outboxRow struct {
	ID       int64
	EventSeq int64
	Kind     string
	ChatID   string
	Text     string // HTML, escaped
	Urgent   bool
	Attempts int
}

// NewTelegramReactor returns the reactor that records notifications.
func NewTelegramReactor(cfg TelegramConfig) Reactor {
	cfg = cfg.withDefaults()
	return Reactor{
		Name:  telegramReactorID,
		Types: append([]string(nil), telegramEventTypes...),
		// With notifications off it only moves its checkpoint: no look per
		// completion (ADR 037).
		Dormant: !cfg.Enabled,
		Handle: func(ctx context.Context, tx pgx.Tx, evs []events.Envelope) error {
			if !cfg.Enabled {
				return nil // kill switch: the checkpoint moves on, nothing is recorded
			}
			return recordNotifications(ctx, tx, cfg, evs)
		},
	}
}

// taskFacts is what a line says about a task, read in the runner's tx.
type taskFacts struct {
	Title      string
	RetryCount int
	MaxRetries int
	Result     json.RawMessage
	// RetryOutcome is the retry decision when it is already taken ("" not
	// yet), and RetryTaskID the retry it created.
	RetryOutcome string
	RetryTaskID  string
	Schedule     string // the name of the schedule that created the task, if one did
	// DataFiles and DataBytes sum the task data uploaded for the task.
	DataFiles int
	DataBytes int64
}

func recordNotifications(ctx context.Context, tx pgx.Tx, cfg TelegramConfig, evs []events.Envelope) error {
	var taskIDs, workerIDs []string
	for i := range evs {
		if evs[i].Payload == nil {
			if err := evs[i].Decode(); err != nil {
				return err
			}
		}
		switch p := evs[i].Payload.(type) {
		case events.TaskCompleted:
			taskIDs, workerIDs = append(taskIDs, evs[i].StreamID), append(workerIDs, p.WorkerID)
		case events.TaskFailed:
			taskIDs, workerIDs = append(taskIDs, evs[i].StreamID), append(workerIDs, p.WorkerID)
		case events.WorkerWentOffline:
			workerIDs = append(workerIDs, evs[i].StreamID)
		case events.SchedulePaused, events.ScheduleFireFailed:
			taskIDs = append(taskIDs, evs[i].StreamID) // a schedule: loadFacts reads its name
		case events.TaskTypePaused:
			taskIDs, workerIDs = append(taskIDs, evs[i].StreamID), append(workerIDs, p.By) // a type: its label
		case events.TaskTypeResumed:
			taskIDs, workerIDs = append(taskIDs, evs[i].StreamID), append(workerIDs, p.By)
		default:
			taskIDs = append(taskIDs, evs[i].StreamID)
		}
	}
	tasks, names, err := loadFacts(ctx, tx, taskIDs, workerIDs)
	if err != nil {
		return err
	}
	var rows []outboxRow
	for _, e := range evs {
		if r, ok := notificationFor(e, tasks, names); ok {
			r.ChatID = cfg.ChatID
			rows = append(rows, r)
		}
	}
	n, err := insertOutbox(ctx, tx, rows, cfg.Now())
	if err != nil {
		return err
	}
	if n > 0 && cfg.OnEnqueue != nil {
		cfg.OnEnqueue()
	}
	return nil
}

// loadFacts reads titles, retry budgets, results and worker names for a
// batch of events in one round trip.
func loadFacts(ctx context.Context, tx pgx.Tx, taskIDs, workerIDs []string) (map[string]taskFacts, map[string]string, error) {
	tasks := map[string]taskFacts{}
	names := map[string]string{}
	taskIDs, workerIDs = validIDs(taskIDs), validIDs(workerIDs)
	if len(taskIDs) == 0 && len(workerIDs) == 0 {
		return tasks, names, nil
	}
	b := &pgx.Batch{}
	// An archived type gets no retries (the retry reactor skips them).
	b.Queue(`SELECT t.id::text, t.title, t.retry_count,
		    CASE WHEN coalesce(tt.archived, true) THEN 0 ELSE tt.max_retries END, t.result, coalesce(t.retry_outcome, ''),
		    coalesce(t.retry_task_id::text, ''), coalesce(s.name, ''), d.files, d.bytes
		FROM worker_tasks t LEFT JOIN task_types tt ON tt.id = t.task_type_id
		    LEFT JOIN schedules s ON s.id = t.schedule_id
		    CROSS JOIN LATERAL (SELECT count(*)::int AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes
		        FROM task_data WHERE task_id = t.id) d
		WHERE t.id = ANY ($1::uuid[])`, taskIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			var f taskFacts
			if err := rows.Scan(&id, &f.Title, &f.RetryCount, &f.MaxRetries, &f.Result, &f.RetryOutcome, &f.RetryTaskID,
				&f.Schedule, &f.DataFiles, &f.DataBytes); err != nil {
				return err
			}
			tasks[id] = f
		}
		return rows.Err()
	})
	// Schedule events: the schedule's own name.
	b.Queue(`SELECT id::text, name FROM schedules WHERE id = ANY ($1::uuid[])`, taskIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, name string
			if err := rows.Scan(&id, &name); err != nil {
				return err
			}
			tasks[id] = taskFacts{Title: name, Schedule: name}
		}
		return rows.Err()
	})
	// Task type events: the type's label.
	b.Queue(`SELECT id::text, label FROM task_types WHERE id = ANY ($1::uuid[])`, taskIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, label string
			if err := rows.Scan(&id, &label); err != nil {
				return err
			}
			tasks[id] = taskFacts{Title: label}
		}
		return rows.Err()
	})
	b.Queue(`SELECT id::text, full_name FROM users WHERE id = ANY ($1::uuid[])`, workerIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id, name string
			if err := rows.Scan(&id, &name); err != nil {
				return err
			}
			names[id] = name
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("telegram: read titles and names: %w", err)
	}
	return tasks, names, nil
}

// validIDs keeps the UUIDs: one malformed id in a payload must not make
// the batch fail (and be retried) forever; its line names the raw id instead.
func validIDs(ids []string) []string {
	var out []string
	for _, id := range ids {
		if _, err := uuid.Parse(id); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// notificationFor renders one event as an outbox line; false for events
// that say nothing worth a message.
func notificationFor(e events.Envelope, tasks map[string]taskFacts, names map[string]string) (outboxRow, bool) {
	r := outboxRow{EventSeq: e.Seq, Kind: e.Type}
	t, ok := tasks[e.StreamID]
	if !ok {
		t.Title = "task " + e.StreamID // the projection is missing: still say something
	}
	name := func(id string) string {
		if n, ok := names[id]; ok && strings.TrimSpace(n) != "" {
			return esc(n, budgetName)
		}
		if id == "" {
			return "an unknown worker"
		}
		return esc(id, budgetName)
	}
	title := bold(esc(t.Title, budgetTitle))
	chain := bold(esc(baseTitle(t.Title), budgetTitle))
	switch p := e.Payload.(type) {
	case events.TaskCompleted:
		r.Text = fmt.Sprintf("✅ %s completed by %s.", title, name(p.WorkerID))
		s := summarizeResult(t.Result)
		if t.DataFiles > 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s, %s", plural(t.DataFiles, "file", "files"), events.HumanBytes(t.DataBytes))
		}
		if s != "" {
			r.Text += " " + esc(s, budgetSummary)
		}
	case events.TaskFailed:
		retry := t.RetryCount < t.MaxRetries
		if p.Kind == events.FailureWorkerOffline {
			next := "Returning to queue."
			if !retry {
				next = "No retries left."
			}
			r.Text = fmt.Sprintf("🧊 %s stuck — %s offline. %s", title, name(p.WorkerID), next)
		} else {
			r.Text = fmt.Sprintf("❌ %s failed. Reason: %s. Retry: %s", title,
				esc(strings.TrimRight(p.Reason, ". "), budgetReason), retryAnswer(p.Kind, t, retry))
		}
	case events.TaskRetried:
		manual := ""
		if p.Manual {
			manual = " (manual)"
		}
		r.Text = fmt.Sprintf("🔁 Retry %d/%d%s: %s back in queue.", p.RetryNumber, p.MaxRetries, manual, chain)
		if strings.TrimSpace(p.Hint) != "" {
			r.Text += " Hint: " + esc(p.Hint, budgetHint)
		}
	case events.TaskRetriesExhausted:
		r.Text = fmt.Sprintf("🚨 %s failed after %s. Needs human attention.", chain, plural(p.Attempts, "attempt", "attempts"))
		r.Urgent = true
	case events.TaskRetrySkipped:
		r.Text = fmt.Sprintf("⚠️ %s will not be retried: %s", title, esc(p.Reason, budgetReason))
		r.Urgent = true
	case events.WorkerWentOffline:
		r.Text = fmt.Sprintf("📴 %s went offline with %s in progress", bold(name(e.StreamID)), plural(p.InProgress, "task", "tasks"))
	case events.SchedulePaused:
		if !p.Auto {
			return r, false // an admin's pause: they know
		}
		r.Text = fmt.Sprintf("⏸️ Schedule %s paused itself: %s. Resume it when fixed.", title, esc(p.Reason, budgetReason))
		r.Urgent = true
		return r, true
	case events.ScheduleFireFailed:
		r.Text = fmt.Sprintf("⚠️ Schedule %s could not create its task: %s", title, esc(p.Reason, budgetReason))
		r.Urgent = true
		return r, true
	case events.TaskTypePaused:
		r.Text = fmt.Sprintf("⏸️ Task type %s paused by %s: %s. Its tasks wait until it is resumed.", title, actorName(e, name(p.By)), esc(p.Reason, budgetReason))
		r.Urgent = e.Meta.Actor.Kind == events.ActorSystem // a budget, not an admin who knows
		return r, true
	case events.TaskTypeResumed:
		r.Text = fmt.Sprintf("▶️ Task type %s resumed by %s.", title, actorName(e, name(p.By)))
		if strings.TrimSpace(p.Reason) != "" {
			r.Text = strings.TrimSuffix(r.Text, ".") + ": " + esc(p.Reason, budgetReason)
		}
		return r, true
	default:
		return r, false
	}
	if t.Schedule != "" {
		r.Text += " (schedule " + bold(esc(t.Schedule, budgetName)) + ")"
	}
	return r, true
}

// actorName is the escaped name of who caused e: a Telegram user by the
// name they had when they acted, anyone else as named (a user's name).
func actorName(e events.Envelope, named string) string {
	if a := e.Meta.Actor; a.Kind == events.ActorTelegram && a.Name != "" {
		return esc(a.Name, budgetName) + " (Telegram)"
	}
	return named
}

// retryAnswer says whether a failure is retried: the decision when the
// retry reactor has taken it (retryDecided); before, a provisional answer
// between retryOpen and retryClose: "pending" for an error with retries
// left (the advisor may still skip it), else "yes" or "no". The sender
// replaces it with the decision when the same batch carries it
// (settleRetries), so a message never says "pending" above its own answer.
func retryAnswer(kind string, t taskFacts, retriesLeft bool) string {
	if t.RetryOutcome != "" {
		return retryDecided(t.RetryOutcome, t.RetryTaskID)
	}
	provisional := "yes"
	switch {
	case !retriesLeft:
		provisional = "no"
	case kind == events.FailureError:
		provisional = "pending"
	}
	return retryOpen + provisional + retryClose
}

// retryOpen and retryClose mark a provisional retry answer in an outbox
// row. User text is escaped, so it can never contain them; the sender
// always removes them.
const (
	retryOpen  = "<retry>"
	retryClose = "</retry>"
)

// retryDecided is a failure's retry answer once the retry reactor decided:
// outcome is a worker_tasks.retry_outcome, retryTaskID the retry created.
func retryDecided(outcome, retryTaskID string) string {
	switch outcome {
	case events.RetryOutcomeRetried:
		if retryTaskID == "" {
			return "created"
		}
		return "created (#" + esc(retryTaskID, budgetName) + ")"
	case events.RetryOutcomeSkipped:
		return "skipped"
	}
	return "exhausted"
}

// execer is what both a pool and a pgx.Tx offer for writes.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertOutbox adds rows once: a replayed event finds its row and adds
// nothing. It returns how many rows are new.
func insertOutbox(ctx context.Context, q execer, rows []outboxRow, now time.Time) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	seqs := make([]int64, len(rows))
	kinds := make([]string, len(rows))
	chats := make([]string, len(rows))
	texts := make([]string, len(rows))
	urgent := make([]bool, len(rows))
	for i, r := range rows {
		seqs[i], kinds[i], chats[i], texts[i], urgent[i] = r.EventSeq, r.Kind, r.ChatID, r.Text, r.Urgent
	}
	tag, err := q.Exec(ctx, `INSERT INTO telegram_outbox (event_seq, kind, chat_id, text, urgent, created_at, next_attempt_at)
		SELECT s, k, c, t, u, $6, $6 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bool[]) AS x(s, k, c, t, u)
		ON CONFLICT (event_seq, kind) DO NOTHING`, seqs, kinds, chats, texts, urgent, now)
	if err != nil {
		return 0, fmt.Errorf("telegram: insert outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}
