package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/store/advisory"
	"github.com/clawdbot/task-service/store/archive"
)

// PeriodStart is the start of the period of kind (archive.Day, archive.Week:
// EVENT_PARTITION) that holds t.
func PeriodStart(kind string, t time.Time) time.Time { return archive.PeriodOf(kind, t).Start }

// PeriodEnd is the start of the period after the one that starts at start.
func PeriodEnd(kind string, start time.Time) time.Time {
	return archive.Period{Kind: kind, Start: start}.End()
}

// partitionName names a partition: a whole period by its start
// (task_events_d20261120, task_events_w20261116), anything else by its
// bounds, upper excluded (task_events_d20261128_to_d20261130).
func partitionName(kind string, from, to time.Time) string {
	if PeriodStart(kind, from).Equal(from) && PeriodEnd(kind, from).Equal(to) {
		return "task_events_" + kind[:1] + from.Format("20060102")
	}
	return "task_events_d" + from.Format("20060102") + "_to_d" + to.Format("20060102")
}

// EventPartition is one partition of task_events: [From, To) of
// occurred_at, or the default partition (zero bounds), which takes events
// whose period has none yet.
type EventPartition struct {
	Name     string
	From, To time.Time
	Default  bool
}

// PartitionPolicy says what MaintainPartitions keeps.
type PartitionPolicy struct {
	// Kind: archive.Day or archive.Week (EVENT_PARTITION).
	Kind string
	// Ahead: how many periods after the current one have partitions.
	Ahead int
	// Retention: a partition whose end is older than this may be dropped
	// (when empty and archived); 0 drops nothing.
	Retention time.Duration
	// Archived reports whether the period of kind starting at start has its
	// archive (the manifest in the task-data store). Nil: nothing counts as
	// archived, so nothing is dropped.
	Archived func(ctx context.Context, kind string, start time.Time) (bool, error)
	// MergeBelow: past retention, neighbouring partitions that together
	// hold fewer events than this (and are not empty) become one; 0 merges
	// nothing.
	MergeBelow int64
}

// PartitionReport says what one maintenance pass did.
type PartitionReport struct {
	Created []string
	// Moved: events moved from the default partition into new ones.
	Moved   int64
	Dropped []string
	Merged  []string
	// Partitions: how many task_events has after the pass, the default
	// included.
	Partitions int
	// Skipped: another instance was maintaining, so this pass did nothing.
	Skipped bool
}

// partitionLockKey is the advisory lock a maintenance pass holds: one
// instance creates and drops partitions at a time.
const partitionLockKey = 7034_0001

// partitionLockTimeout bounds how long a pass waits for a lock on the log:
// detaching (a drop, a merge) takes task_events' ACCESS EXCLUSIVE lock, and
// while it waits behind a long reader every reader and writer queues
// behind it (ADR 034). It gives up and tries again on the next pass.
const partitionLockTimeout = "500ms"

// MaintainPartitions runs one pass: it creates the partitions of the
// current period and of pol.Ahead periods after it, moves the events that
// landed in the default partition into partitions of their own periods,
// drops partitions past retention that are empty and archived, and merges
// sparse ones past retention. Each step is its own short transaction.
func (db *DB) MaintainPartitions(ctx context.Context, pol PartitionPolicy) (PartitionReport, error) {
	var rep PartitionReport
	if _, err := archive.ParseKind(pol.Kind); err != nil {
		return rep, fmt.Errorf("maintain partitions: %w", err)
	}
	conn, release, locked, err := advisory.TryLock(ctx, db.pool.Pool, partitionLockKey)
	if err != nil {
		return rep, mapErr(fmt.Errorf("maintain partitions: lock: %w", err))
	}
	if !locked {
		rep.Skipped = true
		return rep, nil
	}
	defer release()
	now := db.Now()

	// The periods that need a partition: those of the events in the default
	// partition, then the current one and the ones ahead.
	rows, err := conn.Query(ctx, `SELECT DISTINCT date_trunc($1, occurred_at, 'UTC') FROM task_events_default`, pol.Kind)
	if err != nil {
		return rep, mapErr(fmt.Errorf("maintain partitions: %w", err))
	}
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return rep, mapErr(fmt.Errorf("maintain partitions: %w", err))
	}
	cur := PeriodStart(pol.Kind, now)
	for range max(pol.Ahead, 0) + 1 {
		starts = append(starts, cur)
		cur = PeriodEnd(pol.Kind, cur)
	}
	for _, s := range starts {
		s = PeriodStart(pol.Kind, s)
		if err := db.coverPeriod(ctx, conn.Conn(), pol.Kind, s, &rep); err != nil {
			return rep, err
		}
	}

	if pol.Retention > 0 {
		if err := db.dropExpired(ctx, conn.Conn(), pol, now.Add(-pol.Retention), &rep); err != nil {
			return rep, err
		}
		if pol.MergeBelow > 0 {
			if err := db.mergeSparse(ctx, conn.Conn(), pol, now.Add(-pol.Retention), &rep); err != nil {
				return rep, err
			}
		}
	}
	parts, err := EventPartitions(ctx, conn.Conn())
	if err != nil {
		return rep, err
	}
	rep.Partitions = len(parts)
	return rep, nil
}

// coverPeriod creates partitions for the parts of the period [start, end)
// that none covers, each with the default partition's events of its range.
func (db *DB) coverPeriod(ctx context.Context, conn *pgx.Conn, kind string, start time.Time, rep *PartitionReport) error {
	parts, err := EventPartitions(ctx, conn)
	if err != nil {
		return err
	}
	end := PeriodEnd(kind, start)
	for _, gap := range gaps(parts, start, end) {
		name := partitionName(kind, gap[0], gap[1])
		moved, err := createPartition(ctx, conn, name, gap[0], gap[1], nil, gap[0].Before(db.Now().Add(ClockSkew)))
		if err != nil {
			return err
		}
		rep.Created = append(rep.Created, name)
		rep.Moved += moved
	}
	return nil
}

// gaps are the parts of [from, to) that no partition in parts covers.
func gaps(parts []EventPartition, from, to time.Time) [][2]time.Time {
	var out [][2]time.Time
	at := from
	for _, p := range parts {
		if p.Default || !p.To.After(at) {
			continue
		}
		if !p.From.Before(to) {
			break
		}
		if p.From.After(at) {
			out = append(out, [2]time.Time{at, p.From})
		}
		at = p.To
		if !at.Before(to) {
			return out
		}
	}
	if at.Before(to) {
		out = append(out, [2]time.Time{at, to})
	}
	return out
}

// createPartition makes the partition name of [from, to) in one
// transaction: a table like task_events, the default partition's events of
// the range moved into it (with those of the partitions in absorb, which it
// replaces: a merge), then attached, its indexes named after the
// partitioned table's (task_events_position: NAME_position). begun says
// writers may be writing events of the range now (it starts before the
// clock plus ClockSkew).
func createPartition(ctx context.Context, conn *pgx.Conn, name string, from, to time.Time, absorb []string, begun bool) (int64, error) {
	var moved int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		ident := pgx.Identifier{name}.Sanitize()
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+partitionLockTimeout+`'`); err != nil {
			return err
		}
		// Events that move (out of the default partition, or a merge's)
		// move under task_events' ACCESS EXCLUSIVE lock: a statement that
		// planned without the new partition and took its snapshot after
		// the move's commit would find them in neither table (ADR 034).
		// Readers wait for the lock, then plan with the new partition.
		// The default partition is nearly empty, so the wait is short. A
		// range that has begun takes it before looking: a writer could
		// route an event of it to the default partition between the look
		// and the attach, which then fails, or fails that writer's insert
		// (23514). A range ahead with nothing to move takes no such lock
		// (attaching an empty table hides nothing).
		lock := begun || len(absorb) > 0
		if !lock { // lock when there are events to move
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM task_events_default WHERE occurred_at >= $1 AND occurred_at < $2)`,
				from, to).Scan(&lock); err != nil {
				return err
			}
		}
		if lock {
			if _, err := tx.Exec(ctx, `LOCK TABLE task_events IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+ident+` (LIKE task_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
			return err
		}
		sources := []string{"task_events_default"}
		for _, a := range absorb {
			if _, err := tx.Exec(ctx, `ALTER TABLE task_events DETACH PARTITION `+pgx.Identifier{a}.Sanitize()); err != nil {
				return err
			}
			sources = append(sources, a)
		}
		for _, src := range sources {
			tag, err := tx.Exec(ctx, `WITH m AS (DELETE FROM `+pgx.Identifier{src}.Sanitize()+` WHERE occurred_at >= $1 AND occurred_at < $2 RETURNING *)
				INSERT INTO `+ident+` SELECT * FROM m`, from, to)
			if err != nil {
				return err
			}
			if src == "task_events_default" {
				moved += tag.RowsAffected()
			}
		}
		for _, a := range absorb {
			if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{a}.Sanitize()); err != nil {
				return err
			}
		}
		// ATTACH takes no parameters: the bounds are rendered.
		if _, err := tx.Exec(ctx, `ALTER TABLE task_events ATTACH PARTITION `+ident+` FOR VALUES FROM (`+
			boundLiteral(from)+`) TO (`+boundLiteral(to)+`)`); err != nil {
			return err
		}
		return nameIndexes(ctx, tx, name)
	})
	if err != nil {
		return 0, mapErr(fmt.Errorf("create partition %s: %w", name, err))
	}
	if moved > 0 || len(absorb) > 0 {
		// A new table has no statistics until autovacuum gets to it: the
		// planner would take its moved rows for none (ANALYZE blocks no
		// reader or writer).
		if _, err := conn.Exec(ctx, `ANALYZE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return moved, mapErr(fmt.Errorf("analyze partition %s: %w", name, err))
		}
	}
	return moved, nil
}

func boundLiteral(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'" }

// nameIndexes renames partition name's indexes after the partitioned
// table's ones they belong to: task_events_position is NAME_position on it,
// so a plan names the index it walks.
func nameIndexes(ctx context.Context, q Querier, name string) error {
	rows, err := q.Query(ctx, `SELECT format('ALTER INDEX %I RENAME TO %I', c.relname, $1 || substr(p.relname, length('task_events') + 1))
		  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		  JOIN pg_index x ON x.indexrelid = c.oid
		 WHERE x.indrelid = $1::regclass AND c.relname <> $1 || substr(p.relname, length('task_events') + 1)`, name)
	if err != nil {
		return err
	}
	renames, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, r := range renames {
		if _, err := q.Exec(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// partitionBound reads a partition's bound as pg_get_expr prints it under
// TimeZone UTC.
var partitionBound = regexp.MustCompile(`^FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)$`)

// EventPartitions lists task_events' partitions by their bounds, the
// default one last.
func EventPartitions(ctx context.Context, q Querier) ([]EventPartition, error) {
	rows, err := q.Query(ctx, `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		 WHERE i.inhparent = 'task_events'::regclass`)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list partitions: %w", err))
	}
	type row struct{ name, bound string }
	raw, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.name, &x.bound)
	})
	if err != nil {
		return nil, mapErr(fmt.Errorf("list partitions: %w", err))
	}
	var out []EventPartition
	var def *EventPartition
	for _, x := range raw {
		if x.bound == "DEFAULT" {
			def = &EventPartition{Name: x.name, Default: true}
			continue
		}
		m := partitionBound.FindStringSubmatch(x.bound)
		if m == nil {
			return nil, fmt.Errorf("list partitions: %s: unexpected bound %q", x.name, x.bound)
		}
		from, err1 := parseBound(m[1])
		to, err2 := parseBound(m[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("list partitions: %s: %w", x.name, err)
		}
		out = append(out, EventPartition{Name: x.name, From: from, To: to})
	}
	slices.SortFunc(out, func(a, b EventPartition) int { return a.From.Compare(b.From) })
	if def != nil {
		out = append(out, *def)
	}
	return out, nil
}

// parseBound reads a timestamptz literal as PostgreSQL prints it
// (2026-11-27 00:00:00+00, with a fraction or a minutes offset at times).
func parseBound(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999-07:00:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("unexpected bound %q", s)
}

// dropExpired drops the partitions that end before cut, hold no event, and
// whose every period is archived.
func (db *DB) dropExpired(ctx context.Context, conn *pgx.Conn, pol PartitionPolicy, cut time.Time, rep *PartitionReport) error {
	if pol.Archived == nil {
		return nil
	}
	parts, err := EventPartitions(ctx, conn)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if p.Default || p.To.After(cut) {
			continue
		}
		var empty bool
		if err := conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM `+pgx.Identifier{p.Name}.Sanitize()+`)`).Scan(&empty); err != nil {
			return mapErr(fmt.Errorf("drop partition %s: %w", p.Name, err))
		}
		if !empty {
			continue
		}
		archived, err := allArchived(ctx, pol, p)
		if err != nil {
			return fmt.Errorf("drop partition %s: %w", p.Name, err)
		}
		if !archived {
			continue
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+partitionLockTimeout+`'`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `ALTER TABLE task_events DETACH PARTITION `+pgx.Identifier{p.Name}.Sanitize()); err != nil {
				return err
			}
			// Rows committed since the look above would be lost: drop only
			// a partition still empty under its lock.
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{p.Name}.Sanitize()).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return errNotEmpty
			}
			_, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{p.Name}.Sanitize())
			return err
		})
		if errors.Is(err, errNotEmpty) {
			continue
		}
		if err != nil {
			return mapErr(fmt.Errorf("drop partition %s: %w", p.Name, err))
		}
		rep.Dropped = append(rep.Dropped, p.Name)
	}
	return nil
}

var errNotEmpty = errors.New("partition not empty")

// allArchived: every period of pol.Kind that overlaps p has its archive.
func allArchived(ctx context.Context, pol PartitionPolicy, p EventPartition) (bool, error) {
	for s := PeriodStart(pol.Kind, p.From); s.Before(p.To); s = PeriodEnd(pol.Kind, s) {
		ok, err := pol.Archived(ctx, pol.Kind, s)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// mergeSparse merges runs of neighbouring partitions past cut that hold
// fewer than pol.MergeBelow events together into one partition of their
// whole range: each partition costs every unpruned read one index probe,
// and compaction leaves old ones holding only live chains' events.
func (db *DB) mergeSparse(ctx context.Context, conn *pgx.Conn, pol PartitionPolicy, cut time.Time, rep *PartitionReport) error {
	parts, err := EventPartitions(ctx, conn)
	if err != nil {
		return err
	}
	var run []EventPartition
	var total int64
	flush := func() error {
		if len(run) > 1 {
			from, to := run[0].From, run[len(run)-1].To
			var absorb []string
			for _, p := range run {
				absorb = append(absorb, p.Name)
			}
			name := partitionName(pol.Kind, from, to)
			if _, err := createPartition(ctx, conn, name, from, to, absorb, true); err != nil {
				return err
			}
			rep.Merged = append(rep.Merged, name)
		}
		run, total = nil, 0
		return nil
	}
	for _, p := range parts {
		if p.Default || p.To.After(cut) {
			break
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+pgx.Identifier{p.Name}.Sanitize()+` LIMIT $1) x`, pol.MergeBelow).Scan(&n); err != nil {
			return mapErr(fmt.Errorf("merge partitions: %w", err))
		}
		contiguous := len(run) == 0 || run[len(run)-1].To.Equal(p.From)
		if n == 0 || !contiguous || total+n >= pol.MergeBelow {
			if err := flush(); err != nil {
				return err
			}
		}
		if n == 0 || n >= pol.MergeBelow {
			// Empty ones wait to be dropped; full ones stay as they are.
			continue
		}
		run = append(run, p)
		total += n
	}
	return flush()
}
