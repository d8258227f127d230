package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/store/digest"
)

// digestPreview is today's digest as the chat gets it.
type digestPreview struct {
	Day      string    `json:"day" doc:"the calendar day of the digest (YYYY-MM-DD) in time_zone"`
	TimeZone string    `json:"time_zone"`
	DueAt    time.Time `json:"due_at" doc:"when it goes out (or went out) today"`
	From     time.Time `json:"from" doc:"the period it reports starts here"`
	To       time.Time `json:"to" doc:"and ends here: due_at, or now before due_at"`
	Partial  bool      `json:"partial" doc:"true before due_at: the period is not over"`
	HTML     string    `json:"html" doc:"the message in Telegram's HTML parse mode"`
	Text     string    `json:"text" doc:"the message without markup"`
}

// previewDigest builds today's digest: the one sent at today's digest time,
// or, before it, the same period so far.
func (s *Server) previewDigest(c echo.Context) error {
	sched, now := s.cfg.Digest, s.now()
	due := sched.Next(now)
	if last := sched.Last(now); sched.Key(last) == sched.Key(now) {
		due = last
	}
	from, to := sched.Period(due)
	partial := to.After(now)
	if partial {
		to = now
	}
	facts, err := digest.Gather(c.Request().Context(), s.db, from, to)
	if err != nil {
		return err
	}
	html := digest.Text(facts, sched.Loc)
	return ok(c, http.StatusOK, digestPreview{Day: due.In(sched.Loc).Format(time.DateOnly), TimeZone: sched.Loc.String(),
		DueAt: due.UTC(), From: from.UTC(), To: to.UTC(), Partial: partial, HTML: html, Text: digest.Plain(html)})
}
