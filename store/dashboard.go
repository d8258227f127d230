package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// The admin UI's reads beyond the API's (ADR 009). Each is bounded by what
// it shows (the queue, the last hour, a page), never by finished history.

// QueueCount is how many tasks wait in the queue for one priority and type:
// pending and unassigned, of which Claimable now (neither waiting for their
// run_at nor of a paused type).
type QueueCount struct {
	Priority   events.Priority `json:"priority"`
	TaskTypeID string          `json:"task_type_id"`
	Count      int             `json:"count"`
	Claimable  int             `json:"claimable"`
}

// MinuteCount is one minute of the last hour's completions and failures.
type MinuteCount struct {
	Minute    time.Time `json:"minute"`
	Completed int       `json:"completed"`
	Failed    int       `json:"failed"`
}

// Activity is the dashboard's recent activity.
type Activity struct {
	// Queue is the queue (pending, unassigned) by priority and type.
	Queue []QueueCount `json:"queue"`
	// FailedLastHour counts tasks that failed in the last hour (the sixty
	// minutes of PerMinute), and RetriesLastHour the retries created in it.
	FailedLastHour  int `json:"failed_last_hour"`
	RetriesLastHour int `json:"retries_last_hour"`
	// PerMinute has one entry per minute of the last hour, oldest first.
	PerMinute []MinuteCount `json:"per_minute"`
}

// lastHourMinutes reads the counters of the minutes from $1 to $2.
const lastHourMinutes = `SELECT minute, sum(completed), sum(failed), sum(retries) FROM task_minutes
	WHERE minute >= $1 AND minute < $2 GROUP BY minute`

// lastHour is the sixty minutes that "the last hour" counts: the current
// one and the fifty-nine before it.
func (db *DB) lastHour() (start, end time.Time) {
	end = db.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	return end.Add(-time.Hour), end
}

// RecentActivity reads the queue's breakdown (pending_counts: the cells in
// use, however deep the backlog) and the last hour's counters
// (task_minutes: sixty minutes, a few rows each).
func (db *DB) RecentActivity(ctx context.Context) (*Activity, error) {
	start, end := db.lastHour()
	a := &Activity{Queue: []QueueCount{}}
	b := &pgx.Batch{}
	var pids int
	b.Queue(readBacklog).Query(func(rows pgx.Rows) error {
		var err error
		pids, err = scanBacklog(rows, func(c BacklogCell) {
			if c.Assigned || c.State == BacklogBlocked {
				return
			}
			if n := len(a.Queue); n == 0 || a.Queue[n-1].Priority != c.Priority || a.Queue[n-1].TaskTypeID != c.TaskTypeID {
				a.Queue = append(a.Queue, QueueCount{Priority: c.Priority, TaskTypeID: c.TaskTypeID})
			}
			q := &a.Queue[len(a.Queue)-1]
			q.Count += c.Tasks
			if c.State == BacklogClaimable {
				q.Claimable += c.Tasks
			}
		})
		return err
	})
	perMinute := map[time.Time]*MinuteCount{}
	for m := start; m.Before(end); m = m.Add(time.Minute) {
		a.PerMinute = append(a.PerMinute, MinuteCount{Minute: m})
	}
	for i := range a.PerMinute {
		perMinute[a.PerMinute[i].Minute] = &a.PerMinute[i]
	}
	b.Queue(lastHourMinutes, start, end).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var m time.Time
				var done, failed, retries int
				if err := rows.Scan(&m, &done, &failed, &retries); err != nil {
					return err
				}
				if mc := perMinute[m.UTC()]; mc != nil {
					mc.Completed, mc.Failed = done, failed
					a.FailedLastHour += failed
					a.RetriesLastHour += retries
				}
			}
			return rows.Err()
		})
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, mapErr(fmt.Errorf("recent activity: %w", err))
	}
	// Within a priority, the biggest queues first.
	slices.SortStableFunc(a.Queue, func(x, y QueueCount) int {
		return cmp.Or(cmp.Compare(x.Priority.Rank(), y.Priority.Rank()), cmp.Compare(y.Count, x.Count))
	})
	if err := db.compactPendingIfMany(ctx, pids); err != nil {
		return nil, err
	}
	return a, nil
}

// InProgress lists the tasks in progress, oldest start first: what the
// fleet holds now (bounded by its slots; worker_tasks_held).
func (db *DB) InProgress(ctx context.Context) ([]events.Task, error) {
	return db.queryTasks(ctx, db.pool, `SELECT `+taskColumns+` FROM worker_tasks t
		WHERE t.status = 'in_progress' ORDER BY t.started_at LIMIT 10000`)
}

// RecentEvents reads the last limit visible events matching f, newest
// first: the live events page starts from them and streams on after the
// newest, with no gap and no repeat. Backward scans of the position index,
// the type index or the stream's events, first over the last day only
// (headBounds): the events found there that headSure vouches for are the
// newest of the whole log; when they are fewer than limit, the read is made
// again with no bound but a filtered user's registration (registeredSince).
func (db *DB) RecentEvents(ctx context.Context, limit int, f LogFilter) ([]events.Envelope, error) {
	since, err := registeredSince(ctx, db.pool, f.WorkerID)
	if err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	b, complete := db.headBounds(), false
	if !since.IsZero() && !since.Before(b.from) {
		b, complete = timeBounds{from: since}, true // every event about the user
	}
	for {
		sql, args := recentEventsSQL(limit, f, b)
		rows, err := db.pool.Query(ctx, sql, args...)
		if err != nil {
			return nil, mapErr(fmt.Errorf("recent events: %w", err))
		}
		out, err := pgx.CollectRows(rows, scanEvent)
		if err != nil || complete {
			return out, mapErr(err)
		}
		sure := 0
		for i, e := range out {
			if db.headSure(e.Position(), e.OccurredAt, b.from) {
				sure = i + 1
			}
		}
		if sure == limit {
			return out, nil
		}
		b, complete = timeBounds{from: since}, true
	}
}

func recentEventsSQL(limit int, f LogFilter, b timeBounds) (string, []any) {
	args := []any{limit}
	visible := `e.tx_id < pg_snapshot_xmin(pg_current_snapshot())` + b.render("e.occurred_at", &args)
	switch {
	case f.WorkerID != "":
		// The three ways an event can be about a worker, as in readLogSQL,
		// each a backward index scan, merged.
		args = append(args, f.WorkerID)
		w := fmt.Sprintf("$%d", len(args))
		extra := f.where(&args)
		branch := func(cond string) string {
			return `(SELECT e.* FROM task_events e WHERE ` + visible + extra + ` AND ` + cond +
				` ORDER BY e.tx_id DESC, e.seq DESC LIMIT $1)`
		}
		return `SELECT ` + eventColumns + ` FROM (` +
			branch(`e.data ? 'worker_id' AND e.data->>'worker_id' = `+w+`::text`) + ` UNION ` +
			branch(`e.meta->'actor'->>'id' = `+w+`::text`) + ` UNION ` +
			branch(`e.stream_id = `+w+`::uuid`) + `) e ORDER BY e.tx_id DESC, e.seq DESC LIMIT $1`, args
	case f.StreamID != "" || len(f.Types) == 0:
		return `SELECT ` + eventColumns + ` FROM task_events e WHERE ` + visible + f.where(&args) +
			` ORDER BY e.tx_id DESC, e.seq DESC LIMIT $1`, args
	default:
		// One backward scan of the type index per type, merged; each type
		// a literal (readLogSQL says why).
		return `SELECT ` + eventColumns + ` FROM (` + typeBranches(f.Types, func(lit string) string {
			return `SELECT e.* FROM task_events e WHERE e.type = ` + lit + ` AND ` + visible +
				` ORDER BY e.tx_id DESC, e.seq DESC LIMIT $1`
		}) + `) e ORDER BY e.tx_id DESC, e.seq DESC LIMIT $1`, args
	}
}

// Workers lists the first limit workers by name (id and name): the admin
// UI's pickers read one more than they show as a list, to know whether the
// fleet is too big for one (users_by_name, read from its start).
func (db *DB) Workers(ctx context.Context, limit int) ([]WorkerRef, error) {
	rows, err := db.pool.Query(ctx, workersSQL, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("workers: %w", err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[WorkerRef])
	return out, mapErr(err)
}

const workersSQL = `SELECT id, full_name FROM users WHERE is_worker ORDER BY full_name, id LIMIT $1`

// WorkerMatch is a worker a picker suggests.
type WorkerMatch struct {
	ID    string
	Name  string
	Email string
}

// MatchWorkers returns at most limit workers whose name or email starts
// with prefix, ignoring case: the one whose email it is first, then by name.
// They are the picker's suggestions. Each branch is a range of one of
// migration 055's indexes, read from its start.
func (db *DB) MatchWorkers(ctx context.Context, prefix string, limit int) ([]WorkerMatch, error) {
	from := strings.ToLower(prefix)
	// Every string that starts with from sorts (bytewise) before from
	// followed by the highest code point.
	rows, err := db.pool.Query(ctx, matchWorkersSQL, from, from+"\U0010FFFF", limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("match workers: %w", err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[WorkerMatch])
	return out, mapErr(err)
}

const matchWorkersSQL = `SELECT id, full_name, email FROM (
	(SELECT id, full_name, email FROM users WHERE is_worker
	   AND lower(full_name) COLLATE "C" >= $1 AND lower(full_name) COLLATE "C" < $2
	 ORDER BY lower(full_name) COLLATE "C", id LIMIT $3)
	UNION
	(SELECT id, full_name, email FROM users WHERE is_worker
	   AND email COLLATE "C" >= $1 AND email COLLATE "C" < $2
	 ORDER BY email COLLATE "C" LIMIT $3)) m
	ORDER BY email COLLATE "C" = $1 DESC, lower(full_name) COLLATE "C", email COLLATE "C" LIMIT $3`
