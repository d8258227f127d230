package reactors

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The waiting check: "a task waiting more than 30 minutes with no worker to
// claim it" is not an event, it is the absence of one, so a ticker in the
// sender loop looks for it (every WaitingCheckEvery) on every instance.
//
// A task waits from the moment it entered the queue unassigned: its
// task.created, or its last task.released, and never before its available_at
// (a retry's backoff). The outbox row is keyed by the seq of that event with
// kind task.waiting, so however many instances look, however often, a task
// gets one notification per stay in the queue, and one again only if a
// worker took it and released it back. Tasks given to a particular worker
// (assigned, not yet claimed) are not reported: someone chose to wait.
//
// At most waitingBatch tasks are reported per look, oldest first, so a deep
// backlog turns into a steady trickle rather than a flood. A look reads only
// the head of the queue, the first WaitingScan tasks of each priority in
// claim order (ids only, so that the walk is worker_tasks_queue's alone):
// its cost does not grow with the backlog (ADR 004). A backlog deeper than
// that is reported by its head, whose tasks have waited longest; the
// others as the head drains.

const waitingBatch = 20

// waitingTask is a queued task nobody claimed in time.
type waitingTask struct {
	Title  string
	Seq    int64 // the event that queued it: the notification's key
	Since  time.Time
	Online int
}

// checkWaiting records a notification for each task waiting too long and
// returns how many rows are new.
func (s *TelegramSender) checkWaiting(ctx context.Context) (int64, error) {
	now := s.cfg.Now()
	rows, err := s.db.Query(ctx, `SELECT t.title, e.seq, greatest(t.available_at, e.occurred_at),
		    (SELECT count(*) FROM users u WHERE u.is_worker AND u.online)
		  FROM unnest('{0,1,2,3}'::smallint[]) AS p(rank)
		  CROSS JOIN LATERAL (SELECT w.id FROM worker_tasks w
		       WHERE w.priority_rank = p.rank AND w.status = 'pending' AND w.assigned_to IS NULL AND NOT w.scheduled AND NOT w.gated
		       ORDER BY w.priority_rank, w.created_at, w.id LIMIT $4) q
		  JOIN worker_tasks t ON t.id = q.id
		  CROSS JOIN LATERAL (SELECT ev.seq, ev.occurred_at FROM task_events ev
		       WHERE ev.stream_id = t.id AND ev.type IN ('task.created', 'task.released')
		         AND ev.occurred_at >= t.created_at - interval '1 hour'
		       ORDER BY ev.version DESC LIMIT 1) e
		 WHERE t.available_at <= $1 AND e.occurred_at <= $1
		   AND NOT EXISTS (SELECT 1 FROM telegram_outbox o WHERE o.event_seq = e.seq AND o.kind = $2)
		 ORDER BY greatest(t.available_at, e.occurred_at), t.id
		 LIMIT $3`, now.Add(-s.cfg.WaitingAfter), kindWaiting, waitingBatch, s.cfg.WaitingScan)
	if err != nil {
		return 0, fmt.Errorf("telegram: find waiting tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (waitingTask, error) {
		var w waitingTask
		err := r.Scan(&w.Title, &w.Seq, &w.Since, &w.Online)
		return w, err
	})
	if err != nil {
		return 0, fmt.Errorf("telegram: find waiting tasks: %w", err)
	}
	out := make([]outboxRow, len(tasks))
	for i, w := range tasks {
		out[i] = outboxRow{EventSeq: w.Seq, Kind: kindWaiting, ChatID: s.cfg.ChatID, Text: waitingLine(w, now)}
	}
	n, err := insertOutbox(ctx, s.db, out, now)
	if n > 0 {
		s.poked.Store(true)
	}
	return n, err
}

func waitingLine(w waitingTask, now time.Time) string {
	who := "no worker online"
	if w.Online > 0 {
		who = plural(w.Online, "worker", "workers") + " online, none claimed it"
	}
	return fmt.Sprintf("⏳ %s waiting %s for a worker (%s).", bold(esc(w.Title, budgetTitle)),
		waited(now.Sub(w.Since)), who)
}

// waited says how long, to the second under a minute, to the minute under
// an hour, then in hours and minutes.
func waited(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d%time.Hour < time.Minute:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int((d % time.Hour).Minutes()))
}
