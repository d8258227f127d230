package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TelegramUpdate is one Telegram update as telegram_updates records it.
type TelegramUpdate struct {
	UpdateID int64
	ChatID   *int64
	UserID   *int64
	Command  string
	Outcome  string // ran, refused, ignored
}

// RecordTelegramUpdate notes in tx that update u is handled, and reports
// false when it already was: the same update_id delivered again. A second
// delivery racing the first waits on the key until the first commits.
func (db *DB) RecordTelegramUpdate(ctx context.Context, tx pgx.Tx, u TelegramUpdate) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO telegram_updates (update_id, chat_id, user_id, command, outcome, received_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (update_id) DO NOTHING`,
		u.UpdateID, u.ChatID, u.UserID, u.Command, u.Outcome, db.Now())
	if err != nil {
		return false, mapErr(fmt.Errorf("record telegram update: %w", err))
	}
	return tag.RowsAffected() == 1, nil
}

// RefusalEvery is how often one chat is told it is refused: a stranger
// who keeps writing must not make the bot write as often.
const RefusalEvery = time.Hour

// RecentlyRefused reports whether chat was refused, in an update other
// than updateID, within the last RefusalEvery.
func (db *DB) RecentlyRefused(ctx context.Context, tx pgx.Tx, chat, updateID int64) (bool, error) {
	var seen bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM telegram_updates
		WHERE chat_id = $1 AND outcome = 'refused' AND received_at > $2 AND update_id <> $3)`,
		chat, db.Now().Add(-RefusalEvery), updateID).Scan(&seen)
	return seen, mapErr(err)
}

// TelegramUpdatesKept is how long a handled update is remembered. Telegram
// delivers an update again for at most a day (getUpdates keeps it 24 hours;
// a webhook is retried for less), and a refused chat is answered once an
// hour: a week covers both, with room to look back.
const TelegramUpdatesKept = 7 * 24 * time.Hour

// telegramPruneBatch bounds the rows one prune statement deletes.
const telegramPruneBatch = 1000

// PruneTelegramUpdates deletes the handled updates older than
// TelegramUpdatesKept, a batch at a time (rows another instance is deleting
// are skipped), but never the newest: a getUpdates reader starts after it.
// It returns how many it deleted.
func (db *DB) PruneTelegramUpdates(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := db.pool.Exec(ctx, `DELETE FROM telegram_updates WHERE update_id IN (
			SELECT update_id FROM telegram_updates
			 WHERE received_at < $1 AND update_id < (SELECT max(update_id) FROM telegram_updates)
			 LIMIT $2 FOR UPDATE SKIP LOCKED)`, db.Now().Add(-TelegramUpdatesKept), telegramPruneBatch)
		if err != nil {
			return total, mapErr(fmt.Errorf("prune telegram updates: %w", err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < telegramPruneBatch {
			return total, nil
		}
	}
}

// NextTelegramUpdate is the update_id after the newest one handled (0 when
// none): where a getUpdates reader starts after a takeover.
func (db *DB) NextTelegramUpdate(ctx context.Context) (int64, error) {
	var next int64
	err := db.pool.QueryRow(ctx, `SELECT coalesce(max(update_id) + 1, 0) FROM telegram_updates`).Scan(&next)
	return next, mapErr(err)
}

// TelegramReplyKind is the outbox kind of an answer to a command: sent to
// the chat it names, on its own, at once.
const TelegramReplyKind = "telegram.reply"

// QueueTelegramReply adds the answer to update updateID to the outbox in
// tx; text is HTML with user text escaped. The outbox key (update_id,
// kind) keeps it to one answer per update.
func (db *DB) QueueTelegramReply(ctx context.Context, tx pgx.Tx, updateID, chatID int64, text string) error {
	now := db.Now()
	_, err := tx.Exec(ctx, `INSERT INTO telegram_outbox (event_seq, kind, chat_id, text, urgent, created_at, next_attempt_at)
		VALUES ($1, $2, $3, $4, true, $5, $5) ON CONFLICT (event_seq, kind) DO NOTHING`,
		updateID, TelegramReplyKind, fmt.Sprint(chatID), text, now)
	return mapErr(err)
}

// Savepoint runs fn inside a savepoint of tx, with ctx carrying it so the
// store's writes join it (ContextWithTx): when fn fails, what it wrote is
// rolled back and tx goes on. Its commit hooks move to tx on success.
func (db *DB) Savepoint(ctx context.Context, tx pgx.Tx, fn func(ctx context.Context) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return mapErr(fmt.Errorf("savepoint: %w", err))
	}
	if err := fn(ContextWithTx(ctx, sp)); err != nil {
		db.takeHooks(sp)
		if rerr := sp.Rollback(context.WithoutCancel(ctx)); rerr != nil {
			return errors.Join(err, mapErr(rerr))
		}
		return err
	}
	hooks := db.takeHooks(sp)
	if err := sp.Commit(ctx); err != nil {
		return mapErr(fmt.Errorf("release savepoint: %w", err))
	}
	for _, h := range hooks {
		db.onCommit(tx, h)
	}
	return nil
}

// ErrAmbiguous says a task id prefix matches more than one task.
var ErrAmbiguous = errors.New("ambiguous")

// MinTaskPrefix is the shortest task id prefix FindTaskByPrefix takes.
const MinTaskPrefix = 4

// FindTaskByPrefix finds the task whose id starts with prefix (hex digits,
// dashes ignored; a whole id works too). The prefix bounds a range of the
// primary key, so this is one index probe. No match is a not-found error;
// more than one wraps ErrAmbiguous.
func (db *DB) FindTaskByPrefix(ctx context.Context, prefix string) (string, error) {
	hex := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(prefix), "-", ""))
	if len(hex) < MinTaskPrefix || len(hex) > 32 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", events.Invalid("task", "%q is not a task id or a prefix of one (at least %d hex digits)", prefix, MinTaskPrefix)
	}
	lo, hi := uuidOf(hex+strings.Repeat("0", 32-len(hex))), uuidOf(hex+strings.Repeat("f", 32-len(hex)))
	rows, err := db.pool.Query(ctx, `SELECT id::text FROM worker_tasks WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT 2`, lo, hi)
	if err != nil {
		return "", mapErr(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", mapErr(err)
	}
	switch len(ids) {
	case 0:
		return "", events.NotFound("task", prefix)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("task id prefix %q: %w (%s, %s, ...)", prefix, ErrAmbiguous, ids[0], ids[1])
}

func uuidOf(hex string) string {
	return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:]
}

// FindTaskType finds an active task type by its alias or, failing that,
// its name; nil when neither names one.
func (db *DB) FindTaskType(ctx context.Context, ref string) (*events.TaskType, error) {
	var tt events.TaskType
	err := db.pool.QueryRow(ctx, `SELECT `+taskTypeColumns+` FROM task_types tt
		WHERE (tt.alias = $1 OR tt.name = $1) AND NOT tt.archived ORDER BY tt.alias = $1 DESC NULLS LAST LIMIT 1`,
		strings.ToLower(ref)).Scan(taskTypeDest(&tt)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("find task type: %w", err))
	}
	normalizeTaskType(&tt)
	return &tt, nil
}

// TelegramStatus is what /status reports.
type TelegramStatus struct {
	Stats          *Stats
	FailedLastHour int
	PausedTypes    []string
}

// TelegramStatus reads the queue, the workers online, the last hour's
// failures and the paused types: counters and small indexes only.
func (db *DB) TelegramStatus(ctx context.Context) (*TelegramStatus, error) {
	st, err := db.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := &TelegramStatus{Stats: st}
	start, end := db.lastHour()
	err = db.pool.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(failed), 0) FROM task_minutes WHERE minute >= $1 AND minute < $2),
		(SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM task_types WHERE paused AND NOT archived)`,
		start, end).Scan(&out.FailedLastHour, &out.PausedTypes)
	if err != nil {
		return nil, mapErr(fmt.Errorf("telegram status: %w", err))
	}
	return out, nil
}
