package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/advisory"
)

// CompactConfig configures one compaction pass (ADR 035).
type CompactConfig struct {
	// Retention: a retry chain whose tasks all last changed longer ago is
	// compacted (at least a day).
	Retention time.Duration
	// Period is the archive's period kind (day or week): only events in
	// verified archives of that kind are deleted.
	Period string
	// Batch is the chains one transaction looks at (default 100).
	Batch int
	// MaxChains bounds the chains one pass looks at (default 10,000).
	MaxChains int
	// Pause is the least rest after each transaction.
	Pause time.Duration
	// Share is the most of its time a pass spends in transactions (0 <
	// Share <= 1; 0 is DefaultCompactionShare): after each it rests
	// (1/Share - 1) times as long as the transaction took, leaving the
	// database to the readers whatever the machine's speed and load.
	Share float64
}

// DefaultCompactionShare is CompactConfig.Share's default, and
// EVENT_COMPACTION_SHARE's: compaction and the archive rest three times as
// long as they work (ADR 035).
const DefaultCompactionShare = 0.25

// CompactReport says what one pass did.
type CompactReport struct {
	Chains int64 `json:"chains"` // chains compacted
	Tasks  int64 `json:"tasks"`  // task.compacted events appended
	Events int64 `json:"events"` // events deleted
	Looked int64 `json:"looked"` // chains looked at
	// Left counts the chains left for a later pass, by reason.
	Left map[string]int64 `json:"left,omitempty"`
	// Done: the pass reached the retention's start, or a chain whose
	// period is not archived yet; false when MaxChains stopped it first.
	Done bool `json:"done"`
	// Skipped: another instance was compacting.
	Skipped bool `json:"skipped"`
}

// compactLockKey is the advisory lock a pass holds: one instance compacts
// at a time.
const compactLockKey = 7035_0002

// MinRetention is the shortest EVENT_RETENTION.
const MinRetention = 24 * time.Hour

// compactionActor appends the task.compacted events.
var compactionActor = events.Meta{Actor: events.System("compaction")}

// Compact runs one compaction pass: it revisits the chains earlier passes
// left that may qualify now (event_compaction_left), then visits retry
// chains by their first task's (created_at, id) from its cursor until the
// retention's start (or a chain whose period is not archived yet), and in
// each transaction of cfg.Batch chains
// replaces every task's events of the chains that qualify by one
// task.compacted event. A chain qualifies when every task of it is
// finished for good, nothing happened to any before the retention's start,
// no task of it belongs to a running workflow, and every one of its events
// is in a verified archive (archive.Run).
func (db *DB) Compact(ctx context.Context, cfg CompactConfig) (CompactReport, error) {
	rep := CompactReport{Left: map[string]int64{}}
	if cfg.Retention < MinRetention {
		return rep, fmt.Errorf("compact: retention %s is shorter than a day", cfg.Retention)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.MaxChains <= 0 {
		cfg.MaxChains = 10_000
	}
	conn, release, locked, err := advisory.TryLock(ctx, db.pool.Pool, compactLockKey)
	if err != nil {
		return rep, mapErr(fmt.Errorf("compact: lock: %w", err))
	}
	if !locked {
		rep.Skipped = true
		return rep, nil
	}
	defer release()
	cutoff := db.Now().Add(-cfg.Retention)
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = DefaultCompactionShare
	}
	pause := func(began time.Time) error {
		// A transaction holds a connection and about a core of the
		// database: rest so that it does at most cfg.Share of the time.
		rest := time.Duration(float64(time.Since(began)) * (1/cfg.Share - 1))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(cfg.Pause, rest)):
			return nil
		}
	}
	// First the chains earlier passes left that may qualify now (their
	// blocking task changed, or their reason is one time or the archive
	// lifts), by root from where the last pass stopped revisiting
	// (event_compaction.left_id), round the table at most once, and on
	// at most half the pass's chains, so that the sweep is never starved.
	var start string
	if err := conn.QueryRow(ctx, `SELECT coalesce(left_id, $1::uuid)::text FROM event_compaction`, zeroID).Scan(&start); err != nil {
		return rep, mapErr(fmt.Errorf("compact: %w", err))
	}
	after, upto, wrapped := start, maxID, false
	for rep.Looked < int64(max(cfg.Batch, cfg.MaxChains/2)) {
		roots, err := leftRoots(ctx, conn, after, upto, cfg.Batch)
		if err != nil {
			return rep, err
		}
		if len(roots) == 0 {
			if !wrapped && start != zeroID {
				after, upto, wrapped = zeroID, start, true
				continue
			}
			after = zeroID // round the table: the next pass starts over
			break
		}
		began := time.Now()
		err = db.WithTx(ctx, func(tx pgx.Tx) error {
			left, err := db.compactChains(ctx, tx, roots, cutoff, cfg.Period, &rep)
			if err != nil {
				return err
			}
			return recordLeft(ctx, tx, roots, left)
		})
		if err != nil {
			return rep, fmt.Errorf("compact: %w", err)
		}
		rep.Looked += int64(len(roots))
		after = roots[len(roots)-1].id
		if err := pause(began); err != nil {
			return rep, err
		}
	}
	if _, err := conn.Exec(ctx, `UPDATE event_compaction SET left_id = $1::uuid`, after); err != nil {
		return rep, mapErr(fmt.Errorf("compact: %w", err))
	}
	var at time.Time
	var id string
	if err := conn.QueryRow(ctx, `SELECT resume_at, resume_id::text FROM event_compaction`).Scan(&at, &id); err != nil {
		return rep, mapErr(fmt.Errorf("compact: %w", err))
	}
	for rep.Looked < int64(cfg.MaxChains) {
		roots, err := chainRoots(ctx, conn, at, id, cutoff, cfg.Batch)
		if err != nil {
			return rep, err
		}
		if len(roots) == 0 {
			rep.Done = true // the sweep reached the retention's start
			break
		}
		var stop *chainRoot
		began := time.Now()
		err = db.WithTx(ctx, func(tx pgx.Tx) error {
			left, err := db.compactChains(ctx, tx, roots, cutoff, cfg.Period, &rep)
			if err != nil {
				return err
			}
			// A chain whose period has no archive yet stops the sweep
			// there: the archive goes period by period, so the chains
			// after it wait for it too. The rest the cursor passes.
			var kept []leftChain
			for _, l := range left {
				if l.why == notArchived && stop == nil {
					stop = &l.chainRoot
				}
				if l.why != notArchived {
					kept = append(kept, l)
				}
			}
			return recordLeft(ctx, tx, nil, kept)
		})
		if err != nil {
			return rep, fmt.Errorf("compact: %w", err)
		}
		rep.Looked += int64(len(roots))
		last := roots[len(roots)-1]
		at, id = last.createdAt, last.id
		if stop != nil {
			at, id = stop.createdAt, prevID(stop.id)
		}
		if _, err := conn.Exec(ctx, `UPDATE event_compaction SET resume_at = $1, resume_id = $2::uuid, left_at = NULL,
			updated_at = now()`, at, id); err != nil {
			return rep, mapErr(fmt.Errorf("compact: %w", err))
		}
		if stop != nil {
			rep.Done = true
			break
		}
		if err := pause(began); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// notArchived: a chain with an event in a period the archive has not
// written yet.
const notArchived = "not archived yet"

// leftChain is a chain a pass left, with why and the task that blocked
// it (revisited when that task's version moves); blocker "" for reasons
// time or the archive lifts, revisited on every pass.
type leftChain struct {
	chainRoot
	why     string
	blocker string
	version int
}

// leftRootsSQL reads the next chains left by earlier passes that may
// qualify now: by root, after $1 up to $2.
const leftRootsSQL = `SELECT l.root::text, l.created_at FROM event_compaction_left l
		LEFT JOIN worker_tasks w ON w.id = l.blocker
		WHERE l.root > $1::uuid AND l.root <= $2::uuid AND (l.blocker IS NULL OR w.version IS DISTINCT FROM l.blocker_version)
		ORDER BY l.root LIMIT $3`

// The ends of the roots' order. event_compaction.left_id (the first
// chain a pass had left, before migration 052) holds where the revisits
// stopped.
const (
	zeroID = "00000000-0000-0000-0000-000000000000"
	maxID  = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

func leftRoots(ctx context.Context, q Querier, after, upto string, n int) ([]chainRoot, error) {
	rows, err := q.Query(ctx, leftRootsSQL, after, upto, n)
	if err != nil {
		return nil, mapErr(fmt.Errorf("compact: read the chains left: %w", err))
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (chainRoot, error) {
		var c chainRoot
		err := r.Scan(&c.id, &c.createdAt)
		return c, err
	})
}

// recordLeft forgets the chains visited (compacted, gone, or left again)
// and records those left, in tx.
func recordLeft(ctx context.Context, tx pgx.Tx, visited []chainRoot, left []leftChain) error {
	if len(visited) > 0 {
		ids := make([]string, len(visited))
		for i, r := range visited {
			ids[i] = r.id
		}
		if _, err := tx.Exec(ctx, `DELETE FROM event_compaction_left WHERE root = ANY($1::uuid[])`, ids); err != nil {
			return mapErr(err)
		}
	}
	if len(left) == 0 {
		return nil
	}
	roots, ats, whys, blockers, versions := make([]string, len(left)), make([]time.Time, len(left)), make([]string, len(left)),
		make([]*string, len(left)), make([]*int32, len(left))
	for i, l := range left {
		roots[i], ats[i], whys[i] = l.id, l.createdAt, l.why
		if l.blocker != "" {
			b, v := l.blocker, int32(l.version)
			blockers[i], versions[i] = &b, &v
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO event_compaction_left AS l (root, created_at, reason, blocker, blocker_version)
		SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::uuid[], $5::int[])
		ON CONFLICT (root) DO UPDATE SET reason = excluded.reason, blocker = excluded.blocker,
		    blocker_version = excluded.blocker_version, left_at = now()`, roots, ats, whys, blockers, versions)
	return mapErr(err)
}

// prevID returns the id a resume condition "(created_at, id) > (at, x)"
// should hold so that id itself is visited again: id less one.
func prevID(id string) string {
	b := []byte(id)
	// Decrement the hex number (ids are never all zeros).
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '-' {
			continue
		}
		if b[i] == '0' {
			b[i] = 'f'
			continue
		}
		switch {
		case b[i] == 'a':
			b[i] = '9'
		default:
			b[i]--
		}
		break
	}
	return string(b)
}

type chainRoot struct {
	id        string
	createdAt time.Time
}

// chainRootsSQL walks worker_tasks_listing (backwards) from the cursor:
// the page of first tasks only, never the history behind it.
const chainRootsSQL = `SELECT w.id::text AS root, w.created_at FROM worker_tasks w
		WHERE (w.created_at, w.id) > ($1, $2::uuid) AND w.created_at < $3 AND w.parent_task_id IS NULL
		ORDER BY w.created_at, w.id LIMIT $4`

// chainRoots reads the next n first tasks of chains after (at, id) created
// before cutoff, in the listing index's order.
func chainRoots(ctx context.Context, q Querier, at time.Time, id string, cutoff time.Time, n int) ([]chainRoot, error) {
	rows, err := q.Query(ctx, chainRootsSQL, at, id, cutoff, n)
	if err != nil {
		return nil, mapErr(fmt.Errorf("compact: read chains: %w", err))
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (chainRoot, error) {
		var c chainRoot
		err := r.Scan(&c.id, &c.createdAt)
		return c, err
	})
}

// compactEventsSQL reads the chains' events, each with the verified
// archive object that holds it ("" for none; a period's object or one of
// its supplements, the first that does) and, for a late event, its
// period's start (NULL otherwise): an event no object holds whose period
// the archive has passed (it has an object, or a later period has one),
// so that the archive's run in period order will not write it. By the
// streams' index, and event_archives rows by their key.
const compactEventsSQL = `SELECT ` + eventColumns + `, coalesce(a.object_key, ''),
		CASE WHEN a.object_key IS NULL AND EXISTS (SELECT 1 FROM event_archives p
		     WHERE p.period = $2 AND p.period_start >= (date_trunc($2, e.occurred_at AT TIME ZONE 'UTC'))::date)
		     THEN (date_trunc($2, e.occurred_at AT TIME ZONE 'UTC'))::date END
		FROM task_events e
		LEFT JOIN LATERAL (
		    SELECT a.object_key FROM event_archives a
		     WHERE a.period = $2 AND a.verified_at IS NOT NULL
		       AND a.period_start = (date_trunc($2, e.occurred_at AT TIME ZONE 'UTC'))::date
		       AND e.seq BETWEEN a.seq_lo AND a.seq_hi AND pg_visible_in_snapshot(e.tx_id, a.snapshot)
		     ORDER BY a.part LIMIT 1
		) a ON true
		WHERE e.stream_id = ANY($1::uuid[]) ORDER BY e.stream_id, e.version`

// lateEventsSQL records the periods, and the seqs, of events that
// committed after their period was archived: the archive writes a
// supplementary object of each period with those seqs (archive.Run), after
// which their chains are compacted like the rest.
const lateEventsSQL = `INSERT INTO event_archive_late AS l (period, period_start, seq_lo, seq_hi)
		SELECT $1, d.start, d.lo, d.hi FROM unnest($2::date[], $3::bigint[], $4::bigint[]) AS d(start, lo, hi)
		ON CONFLICT (period, period_start) DO UPDATE SET seq_lo = least(l.seq_lo, excluded.seq_lo),
		    seq_hi = greatest(l.seq_hi, excluded.seq_hi), found_at = now()`

// compactChains compacts those of roots' chains that qualify, in tx, and
// returns those left for later.
func (db *DB) compactChains(ctx context.Context, tx pgx.Tx, roots []chainRoot, cutoff time.Time, period string, rep *CompactReport) ([]leftChain, error) {
	ids := make([]string, len(roots))
	for i, r := range roots {
		ids[i] = r.id
	}
	// Every task of the chains, locked in id order (a writer of one of
	// them waits, or this waits for it), with what disqualifies it.
	rows, err := tx.Query(ctx, `WITH RECURSIVE chain(root, id) AS (
    SELECT id, id FROM worker_tasks WHERE id = ANY($1::uuid[])
  UNION ALL
    SELECT c.root, w.retry_task_id FROM chain c JOIN worker_tasks w ON w.id = c.id WHERE w.retry_task_id IS NOT NULL
), locked AS (
    SELECT w.id, w.workflow_id, w.version FROM worker_tasks w WHERE w.id IN (SELECT id FROM chain) ORDER BY w.id FOR UPDATE OF w
)
SELECT c.root::text, c.id::text, l.version,
       EXISTS (SELECT 1 FROM worker_tasks o WHERE l.workflow_id IS NOT NULL AND o.workflow_id = l.workflow_id
               AND (o.status IN ('blocked', 'pending', 'in_progress') OR (o.status = 'failed' AND o.retry_outcome IS NULL)))
  FROM chain c JOIN locked l ON l.id = c.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read chains: %w", err)
	}
	type member struct {
		id          string
		version     int
		runningFlow bool
	}
	chains := map[string][]member{}
	for rows.Next() {
		var root string
		var m member
		if err := rows.Scan(&root, &m.id, &m.version, &m.runningFlow); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read chains: %w", err)
		}
		chains[root] = append(chains[root], m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chains: %w", err)
	}
	var all []string
	for _, ms := range chains {
		for _, m := range ms {
			all = append(all, m.id)
		}
	}
	// Their events, each with the archive that holds it (none: "").
	erows, err := tx.Query(ctx, compactEventsSQL, all, period)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	streams := map[string][]events.Envelope{}
	archivesOf := map[string][]string{}
	unarchived := map[string]bool{}
	late := map[string]bool{}
	type seqs struct{ lo, hi int64 }
	lateSeqs := map[time.Time]seqs{}
	for erows.Next() {
		var e events.Envelope
		var txID int64
		var object string
		var latePeriod *time.Time
		if err := erows.Scan(append(eventDest(&e, &txID), &object, &latePeriod)...); err != nil {
			erows.Close()
			return nil, fmt.Errorf("read events: %w", err)
		}
		if err := finishEvent(&e, txID); err != nil {
			erows.Close()
			return nil, err
		}
		streams[e.StreamID] = append(streams[e.StreamID], e)
		if object == "" {
			unarchived[e.StreamID] = true
			if latePeriod != nil {
				late[e.StreamID] = true
				r, ok := lateSeqs[*latePeriod]
				if !ok {
					r = seqs{e.Seq, e.Seq}
				}
				lateSeqs[*latePeriod] = seqs{min(r.lo, e.Seq), max(r.hi, e.Seq)}
			}
		} else if as := archivesOf[e.StreamID]; len(as) == 0 || as[len(as)-1] != object {
			archivesOf[e.StreamID] = append(as, object)
		}
	}
	if err := erows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}

	b := &pgx.Batch{}
	if len(lateSeqs) > 0 {
		var starts []time.Time
		var los, his []int64
		for start, r := range lateSeqs {
			starts, los, his = append(starts, start), append(los, r.lo), append(his, r.hi)
		}
		b.Queue(lateEventsSQL, period, starts, los, his)
	}
	var appended []events.Envelope
	var delIDs []string
	var delBelow []int32
	var left []leftChain
	for _, r := range roots {
		ms := chains[r.id]
		why := ""
		if len(ms) == 0 {
			why = "gone" // deleted meanwhile: nothing to keep
		}
		var todo []string
		var blocker member
		for _, m := range ms {
			blocker = m
			stream := streams[m.id]
			if len(stream) == 1 && stream[0].Type == (events.TaskCompacted{}).EventType() {
				continue // compacted before, nothing since
			}
			t := events.FoldTask(stream)
			switch {
			case t == nil:
				why = "no events"
			case t.Version != m.version:
				// The events read are not the row's (a concurrent move of
				// the log's rows hid some): never write a state from them.
				why = "its events and its row disagree"
			case m.runningFlow:
				why = "its workflow is running"
			case t.Compactable(cutoff) != "":
				why = t.Compactable(cutoff)
			case late[m.id]:
				why = "an event committed after its period was archived: in the next supplement"
			case unarchived[m.id]:
				why = notArchived
			}
			if why != "" {
				break
			}
			todo = append(todo, m.id)
		}
		if why != "" {
			rep.Left[why]++
			if why != "gone" {
				l := leftChain{chainRoot: r, why: why}
				// A task still open, or awaiting its retry decision, moves
				// its version when that changes: revisit the chain then.
				if blocker.id != "" && (strings.HasPrefix(why, "the task is ") || why == "its retry is not decided yet") {
					l.blocker, l.version = blocker.id, blocker.version
				}
				left = append(left, l)
			}
			continue
		}
		if len(todo) == 0 {
			continue // compacted before
		}
		rep.Chains++
		for _, id := range todo {
			stream := streams[id]
			before := events.FoldTask(stream)
			p, err := events.CompactTask(stream, archivesOf[id])
			if err != nil {
				return nil, err
			}
			p.Data = foldData(stream)
			_, evs, err := projectStream[events.Task](b, db.Now(), events.StreamTask, id, before, []events.Payload{p}, compactionActor,
				func(b *pgx.Batch, before, after *events.Task, evs []events.Envelope) {
					db.projector.Task(b, before, after, evs)
				})
			if err != nil {
				return nil, err
			}
			if err := queueEvents(b, evs); err != nil {
				return nil, err
			}
			appended = append(appended, evs...)
			delIDs = append(delIDs, id)
			delBelow = append(delBelow, int32(evs[0].Version))
			rep.Tasks++
		}
	}
	if len(delIDs) == 0 {
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return nil, mapErr(err)
			}
		}
		return left, nil
	}
	b.Queue(`WITH gone AS (
    DELETE FROM task_events e USING unnest($1::uuid[], $2::int[]) AS d(id, v) WHERE e.stream_id = d.id AND e.version < d.v
    RETURNING 1
) UPDATE event_compaction SET tasks = tasks + $3, events = events + (SELECT count(*) FROM gone)
RETURNING (SELECT count(*) FROM gone)`, delIDs, delBelow, len(delIDs))
	br := tx.SendBatch(ctx, b)
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, mapErr(err)
		}
	}
	var deleted int64
	if err := br.QueryRow().Scan(&deleted); err != nil {
		br.Close()
		return nil, mapErr(err)
	}
	if err := br.Close(); err != nil {
		return nil, mapErr(err)
	}
	rep.Events += deleted
	db.wrote(tx, appended, nil)
	return left, nil
}

// foldData is the task_data rows a stream's data events leave.
func foldData(stream []events.Envelope) []events.TaskData {
	var out []events.TaskData
	for _, e := range stream {
		switch p := e.Payload.(type) {
		case events.TaskCompacted:
			out = append(out[:0], p.Data...)
		case events.TaskDataUploaded:
			i := indexData(out, p.DataID)
			var d events.TaskData
			if i >= 0 {
				d = out[i]
			}
			d.ApplyUpload(e, p)
			if i >= 0 {
				out[i] = d
			} else {
				out = append(out, d)
			}
		case events.TaskDataDeleted:
			if i := indexData(out, p.DataID); i >= 0 {
				out = append(out[:i], out[i+1:]...)
			}
		}
	}
	return out
}

func indexData(ds []events.TaskData, id string) int {
	for i, d := range ds {
		if d.ID == id {
			return i
		}
	}
	return -1
}

// ErrRetentionTooShort: EVENT_RETENTION under a day.
var ErrRetentionTooShort = errors.New("event retention must be at least a day")
