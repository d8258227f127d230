package reactors

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/digest"
)

// The daily digest goes out through the Telegram outbox like every other
// message. Every instance runs this loop; the outbox row is keyed by the
// digest's day (kind digest, event_seq yyyymmdd), so whichever instance
// gets there first sends the day's digest and the others insert nothing,
// across restarts too.

const kindDigest = "digest"

// digestMaxLate is how late a digest still goes out when no instance ran at
// its time (a restart in that minute, a deploy); a later one is skipped,
// not sent hours out of place.
const digestMaxLate = time.Hour

// DigestConfig configures the digest loop.
type DigestConfig struct {
	DB         *store.DB
	Schedule   digest.Schedule
	ChatID     string
	RetryAfter time.Duration    // after a failed attempt (default 10 s)
	Now        func() time.Time // clock (default time.Now)
	Logger     zerolog.Logger
}

// Digest sends the daily digest.
type Digest struct{ cfg DigestConfig }

// NewDigest checks cfg and fills its defaults; it starts nothing.
func NewDigest(cfg DigestConfig) (*Digest, error) {
	if cfg.DB == nil || cfg.Schedule.Loc == nil || cfg.ChatID == "" {
		return nil, errors.New("reactors: DigestConfig.DB, Schedule.Loc and ChatID are required")
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Digest{cfg: cfg}, nil
}

// Run sends each day's digest at its time until ctx ends.
func (d *Digest) Run(ctx context.Context) error {
	log := d.cfg.Logger.With().Str("reactor", "digest").Logger()
	for {
		now := d.cfg.Now()
		wait := time.Until(d.cfg.Schedule.Next(now))
		at := d.cfg.Schedule.Last(now)
		if late := now.Sub(at); late <= digestMaxLate {
			sent, err := d.send(ctx, at)
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				log.Error().Err(err).Time("due", at).Dur("retry_in", d.cfg.RetryAfter).Msg("daily digest not recorded; trying again")
				wait = d.cfg.RetryAfter
			case sent:
				log.Info().Time("due", at).Dur("late", late).Msg("daily digest recorded for Telegram")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// send records the digest due at `at` unless its day has one already; it
// says whether this call recorded it.
func (d *Digest) send(ctx context.Context, at time.Time) (bool, error) {
	key := d.cfg.Schedule.Key(at)
	var exists bool
	if err := d.cfg.DB.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM telegram_outbox WHERE event_seq = $1 AND kind = $2)`,
		key, kindDigest).Scan(&exists); err != nil || exists {
		return false, err
	}
	from, to := d.cfg.Schedule.Period(at)
	facts, err := digest.Gather(ctx, d.cfg.DB, from, to)
	if err != nil {
		return false, err
	}
	row := outboxRow{EventSeq: key, Kind: kindDigest, ChatID: d.cfg.ChatID, Text: digest.Text(facts, d.cfg.Schedule.Loc)}
	// The sender's catch-up ticker (seconds) finds the row: no wake needed.
	n, err := insertOutbox(ctx, d.cfg.DB.Pool(), []outboxRow{row}, d.cfg.Now())
	return n > 0, err
}
