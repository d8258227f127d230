package reactors

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
)

// outboxDB is what the sender needs from the pool.
type outboxDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TelegramSender delivers telegram_outbox rows. Any number of instances may
// run against one database: a row is claimed by one of them at a time
// (SKIP LOCKED, then a lease in next_attempt_at), sent outside any
// transaction, then marked. See the ADR for the one unavoidable window.
type TelegramSender struct {
	db  outboxDB
	hub *store.Hub
	cfg TelegramConfig
	api *botAPI
	log zerolog.Logger

	poked atomic.Bool // the reactor inserted rows; look on the next hub wake
	sends *prometheus.CounterVec

	// Owned by the Run goroutine.
	blockedUntil time.Time // after a 429 or a failure: send nothing before
	failures     int       // consecutive 5xx/network failures, for the backoff
	lastStep     time.Time
	lastSend     time.Time // real time of the last sendMessage, for pacing
}

// NewTelegramSender returns a sender; Run starts it. hub may be nil (then
// only the ticker wakes it).
func NewTelegramSender(db outboxDB, hub *store.Hub, cfg TelegramConfig) (*TelegramSender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &TelegramSender{
		db: db, hub: hub, cfg: cfg, log: cfg.Logger.With().Str("component", "telegram").Logger(),
		api: &botAPI{base: cfg.APIBase, token: cfg.Token, client: cfg.HTTPClient},
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskservice_telegram_sends_total",
			Help: "sendMessage calls by outcome: sent, rejected (dead-lettered), rate_limited (429), failed (5xx, network, refused).",
		}, []string{"outcome"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.sends); err != nil {
			return nil, fmt.Errorf("reactors: register telegram metrics: %w", err)
		}
	}
	return s, nil
}

// Poke says the outbox has news that commits soon: the sender looks on the
// next hub wake instead of waiting for its ticker. Safe from any goroutine.
func (s *TelegramSender) Poke() { s.poked.Store(true) }

// minStepGap bounds how often hub wakes can make the sender query.
const minStepGap = 50 * time.Millisecond

// Run sends until ctx ends, finishing the batch in hand first. With the kill
// switch off it returns at once.
func (s *TelegramSender) Run(ctx context.Context) error {
	if !s.cfg.Enabled {
		return nil
	}
	var wake <-chan struct{}
	if s.hub != nil {
		ch, unsubscribe := s.hub.Subscribe()
		defer unsubscribe()
		wake = ch
	}
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	waiting := time.NewTicker(s.cfg.WaitingCheckEvery)
	defer waiting.Stop()
	timer := time.NewTimer(0) // look once at start: rows may be waiting from before
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			if !s.poked.Load() {
				continue // a commit that added no notification
			}
			if gap := s.cfg.Now().Sub(s.lastStep); gap < minStepGap {
				resetTimer(timer, minStepGap-gap)
				continue
			}
		case <-poll.C:
			s.poked.Store(false)
		case <-timer.C:
		case <-waiting.C:
			if _, err := s.checkWaiting(ctx); err != nil && ctx.Err() == nil {
				s.log.Error().Err(err).Msg("look for tasks waiting too long")
			}
		}
		next, err := s.step(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("deliver notifications")
			next = s.cfg.PollInterval
		}
		if next > 0 {
			resetTimer(timer, next)
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// outboxState is what peek sees of the pending rows.
type outboxState struct {
	pending int
	due     int
	oldest  *time.Time // created_at of the oldest due row
	urgent  bool       // a due row is urgent
	nextDue *time.Time // the earliest next_attempt_at not yet due
}

// step sends every batch that is due and says when to look again (0: only
// when woken).
func (s *TelegramSender) step(ctx context.Context) (time.Duration, error) {
	for ctx.Err() == nil {
		now := s.cfg.Now()
		s.lastStep = now
		if now.Before(s.blockedUntil) {
			return s.blockedUntil.Sub(now), nil
		}
		st, err := s.peek(ctx, now)
		if err != nil {
			return 0, err
		}
		if st.pending > 0 {
			s.poked.Store(false)
		}
		if st.due == 0 {
			if st.nextDue != nil {
				return max(st.nextDue.Sub(now), time.Millisecond), nil
			}
			return 0, nil
		}
		// Hold back while the window fills, unless it is full or urgent.
		if windowEnd := st.oldest.Add(s.cfg.Window); !st.urgent && st.due < s.cfg.MaxBatch && now.Before(windowEnd) {
			return windowEnd.Sub(now), nil
		}
		rows, err := s.claim(ctx, now)
		if err != nil {
			return 0, err
		}
		if len(rows) == 0 {
			return minStepGap, nil // another instance holds them; look again soon
		}
		s.deliver(ctx, rows, now.Add(s.cfg.Lease))
	}
	return 0, nil
}

func (s *TelegramSender) peek(ctx context.Context, now time.Time) (outboxState, error) {
	var st outboxState
	err := s.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE next_attempt_at <= $1),
		    min(created_at) FILTER (WHERE next_attempt_at <= $1),
		    coalesce(bool_or(urgent) FILTER (WHERE next_attempt_at <= $1), false),
		    min(next_attempt_at) FILTER (WHERE next_attempt_at > $1)
		FROM telegram_outbox WHERE status = 'pending'`, now).
		Scan(&st.pending, &st.due, &st.oldest, &st.urgent, &st.nextDue)
	if err != nil {
		return st, fmt.Errorf("telegram: peek at the outbox: %w", err)
	}
	return st, nil
}

// claim takes up to MaxBatch due rows for this instance: SKIP LOCKED keeps
// concurrent claimers apart, and the lease written into next_attempt_at
// keeps them off the rows after this statement commits.
func (s *TelegramSender) claim(ctx context.Context, now time.Time) ([]outboxRow, error) {
	rows, err := s.db.Query(ctx, `WITH b AS (SELECT nextval('telegram_outbox_batch_seq') AS id),
		c AS (SELECT id FROM telegram_outbox
		       WHERE status = 'pending' AND next_attempt_at <= $1
		       ORDER BY urgent DESC, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE telegram_outbox o SET next_attempt_at = $3, attempts = o.attempts + 1, batch_id = b.id
		  FROM c, b WHERE o.id = c.id
		RETURNING o.id, o.event_seq, o.kind, o.chat_id, o.text, o.urgent, o.attempts`,
		now, s.cfg.MaxBatch, now.Add(s.cfg.Lease))
	if err != nil {
		return nil, fmt.Errorf("telegram: claim outbox rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := r.Scan(&o.ID, &o.EventSeq, &o.Kind, &o.ChatID, &o.Text, &o.Urgent, &o.Attempts)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("telegram: claim outbox rows: %w", err)
	}
	// Urgent rows are claimed first; a message tells them in time order.
	slices.SortFunc(out, func(a, b outboxRow) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// settleRetries gives the failure lines of a claimed batch their retry
// answer: the decision a row of the same batch reports for the task, else
// the provisional answer they were written with. The tasks come from the
// rows' events, read only when a line still has a provisional answer; if
// that read fails the lines keep theirs.
func (s *TelegramSender) settleRetries(ctx context.Context, rows []outboxRow) {
	var seqs []int64
	open := false
	for _, r := range rows {
		if r.Kind == kindFailed || decisionOutcome[r.Kind] != "" {
			seqs = append(seqs, r.EventSeq)
			open = open || strings.Contains(r.Text, retryOpen)
		}
	}
	facts := map[int64]retryFact{}
	if open {
		var err error
		if facts, err = s.retryFacts(ctx, seqs); err != nil {
			s.log.Warn().Err(err).Msg("telegram: cannot read the batch's retry decisions; failures keep their provisional answer")
		}
	}
	settleRetries(rows, facts)
}

func (s *TelegramSender) retryFacts(ctx context.Context, seqs []int64) (map[int64]retryFact, error) {
	rows, err := s.db.Query(ctx, `SELECT seq, stream_id::text, coalesce(data->>'retry_task_id', '')
		FROM task_events WHERE seq = ANY ($1)`, seqs)
	if err != nil {
		return nil, err
	}
	facts := map[int64]retryFact{}
	var seq int64
	var f retryFact
	_, err = pgx.ForEachRow(rows, []any{&seq, &f.taskID, &f.retryTaskID}, func() error {
		facts[seq] = f
		return nil
	})
	return facts, err
}

// deliver sends claimed rows: answers to commands each on its own to the
// chat that asked, notifications as one message (split at Telegram's
// limit) to the configured chat, whatever chat the row was recorded for:
// fixing a wrong TELEGRAM_CHAT_ID re-routes what is still pending. It records each outcome. It ignores the caller's cancellation so a
// stopping service finishes the batch in hand, but never starts a call that
// could outlive the lease.
func (s *TelegramSender) deliver(ctx context.Context, rows []outboxRow, leaseEnd time.Time) {
	stopping := ctx.Done()
	ctx = context.WithoutCancel(ctx)
	lease := leaseCtx{end: leaseEnd, stopping: stopping}
	replies, notes := splitReplies(rows)
	s.settleRetries(ctx, notes)
	queue := replies
	if len(notes) > 0 {
		queue = append(queue, composeMessages(notes)...)
	}
	for i := 0; i < len(queue); i++ {
		c := queue[i]
		chat := s.cfg.ChatID
		if c.chatID != "" {
			chat = c.chatID
		}
		if !s.cfg.Now().Add(s.cfg.HTTPTimeout + s.cfg.MessageGap).Before(leaseEnd) {
			s.postpone(ctx, lease, rowsOf(queue[i:]), s.cfg.Now(), "lease ran out before sending")
			return
		}
		s.pace()
		callCtx, cancel := context.WithTimeout(ctx, s.cfg.HTTPTimeout)
		res := s.api.sendMessage(callCtx, chat, c.text)
		cancel()
		s.lastSend = time.Now()
		now := s.cfg.Now()
		s.sends.WithLabelValues(res.outcome.metricLabel()).Inc()
		switch {
		case res.outcome == sendOK:
			s.failures = 0
			s.markSent(ctx, lease, c.rows, now)
		case c.chatID != "" && (res.outcome == sendRefused || res.outcome == sendRejected):
			// An answer's chat refused it (the user blocked the bot, left
			// the group): that says nothing about the other chats.
			s.log.Warn().Int64("outbox_id", c.rows[0].ID).Str("chat_id", c.chatID).Str("description", res.description).
				Msg("telegram refused an answer to a command: dead-lettered")
			s.markDead(ctx, lease, c.rows[0], res.description)
		case res.outcome == sendRejected:
			if len(c.rows) > 1 {
				// One bad line must not sink the others: try each alone.
				single := make([]chunk, len(c.rows))
				for j, r := range c.rows {
					single[j] = chunk{text: r.Text, rows: []outboxRow{r}, chatID: c.chatID}
				}
				queue = slices.Insert(queue, i+1, single...)
				continue
			}
			s.log.Warn().Int64("outbox_id", c.rows[0].ID).Str("kind", c.rows[0].Kind).
				Str("description", res.description).Msg("telegram rejected a notification: dead-lettered")
			s.markDead(ctx, lease, c.rows[0], res.description)
		case res.outcome == sendRetryAfter:
			s.blockedUntil = now.Add(res.retryAfter)
			s.log.Warn().Dur("retry_after", res.retryAfter).Msg("telegram rate limit: holding all sends")
			s.postpone(ctx, lease, rowsOf(queue[i:]), s.blockedUntil, res.description)
			return
		default: // transient or refused: keep the rows, back off
			s.failures++
			delay := s.backoff()
			s.blockedUntil = now.Add(delay)
			ev := s.log.Warn()
			if res.outcome == sendRefused {
				ev = s.log.Error().Str("hint", "check TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID")
			}
			ev.Int("status", res.status).Str("error", res.description).Dur("backoff", delay).
				Msg("telegram send failed: will retry")
			s.postpone(ctx, lease, rowsOf(queue[i:]), s.blockedUntil, res.description)
			return
		}
	}
}

// backoff is exponential in the consecutive failures, capped, with jitter
// (half fixed, half random) so instances do not retry in step.
func (s *TelegramSender) backoff() time.Duration {
	d := s.cfg.BackoffBase
	for i := 1; i < s.failures && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, s.cfg.BackoffMax)
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}

// pace keeps MessageGap between two messages of this instance: Telegram
// allows a group about 20 messages a minute, and a burst of full batches
// would otherwise run into 429s. Real time, not the injected clock: this is
// about Telegram's clock.
func (s *TelegramSender) pace() {
	if s.lastSend.IsZero() {
		return
	}
	if wait := s.cfg.MessageGap - time.Since(s.lastSend); wait > 0 {
		time.Sleep(wait)
	}
}

func rowsOf(chunks []chunk) []outboxRow {
	var out []outboxRow
	for _, c := range chunks {
		out = append(out, c.rows...)
	}
	return out
}

func ids(rows []outboxRow) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// markSent records delivery. It retries while the lease lasts: every failed
// attempt here widens the window in which another instance could send the
// same rows again.
func (s *TelegramSender) markSent(ctx context.Context, lease leaseCtx, rows []outboxRow, now time.Time) {
	s.record(ctx, lease, "mark sent", `UPDATE telegram_outbox SET status = 'sent', sent_at = $2, last_error = NULL,
		    chat_id = CASE WHEN kind = $4 THEN chat_id ELSE $3 END
		WHERE id = ANY ($1) AND status = 'pending'`, ids(rows), now, s.cfg.ChatID, store.TelegramReplyKind)
}

func (s *TelegramSender) markDead(ctx context.Context, lease leaseCtx, row outboxRow, description string) {
	s.record(ctx, lease, "dead-letter", `UPDATE telegram_outbox SET status = 'dead', last_error = $2
		WHERE id = $1 AND status = 'pending'`, row.ID, description)
}

// postpone gives rows back to the queue, due at `at`.
func (s *TelegramSender) postpone(ctx context.Context, lease leaseCtx, rows []outboxRow, at time.Time, why string) {
	if len(rows) == 0 {
		return
	}
	s.record(ctx, lease, "postpone", `UPDATE telegram_outbox SET next_attempt_at = $2, last_error = $3
		WHERE id = ANY ($1) AND status = 'pending'`, ids(rows), at, why)
}

// leaseCtx bounds the bookkeeping retries of one batch: until the lease
// ends, or at once when the service is stopping.
type leaseCtx struct {
	end      time.Time
	stopping <-chan struct{}
}

// record runs one bookkeeping statement, retrying while the lease lasts (and
// the service is not stopping). If it never succeeds the lease expires and
// the rows are simply due again.
func (s *TelegramSender) record(ctx context.Context, lease leaseCtx, what, sql string, args ...any) {
	delay := 50 * time.Millisecond
	for {
		_, err := s.db.Exec(ctx, sql, args...)
		if err == nil {
			return
		}
		if !s.cfg.Now().Add(delay).Before(lease.end) {
			s.log.Error().Err(err).Str("op", what).Msg("telegram outbox bookkeeping failed; the lease will expire")
			return
		}
		s.log.Warn().Err(err).Str("op", what).Msg("telegram outbox bookkeeping failed; retrying")
		select {
		case <-time.After(delay):
		case <-lease.stopping:
			s.log.Error().Err(err).Str("op", what).Msg("telegram outbox bookkeeping failed while stopping; the lease will expire")
			return
		}
		delay = min(delay*2, 2*time.Second)
	}
}
