package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// ErrBusy means another rebuild holds the replay lock.
var ErrBusy = errors.New("another replay is rebuilding the projections")

// rebuildSchema holds the fresh tables until they are swapped in. Tables
// keep their live names there, so their indexes and constraints can keep
// theirs too: errors are mapped by constraint name (store/errors.go).
const rebuildSchema = "replay_rebuild"

// lockKey is the advisory lock that lets one rebuild run at a time.
const lockKey = 0x7265706c6179 // "replay"

// RebuildConfig configures Rebuild.
type RebuildConfig struct {
	Progress ProgressFunc
	// LockTimeout bounds the first wait for the swap's locks (default
	// 500ms: in a lock cycle with a writer the rebuild, below
	// deadlock_timeout, gives up first and the writer goes on). Each retry
	// waits twice as long as the one before, up to twice deadlock_timeout:
	// PostgreSQL cancels an autovacuum that blocks a lock only after the
	// waiter has waited deadlock_timeout, so a shorter wait never gets past
	// one (ADR 010).
	LockTimeout time.Duration
	// LockAttempts bounds how often the swap is tried; 0 (the default)
	// tries until ctx ends: the finished rebuild is never thrown away
	// because a lock was busy.
	LockAttempts int
	// PartitionEvents bounds the events folded at once (default
	// DefaultPartitionEvents).
	PartitionEvents int
}

// RebuildReport is the outcome of Rebuild.
type RebuildReport struct {
	Events       int64            `json:"events"`    // folded from the snapshot
	CaughtUp     int64            `json:"caught_up"` // appended meanwhile, folded after
	Skipped      int64            `json:"skipped"`
	Rows         map[string]int64 `json:"rows"`
	LockAttempts int              `json:"lock_attempts"`
	LockHeld     time.Duration    `json:"lock_held"` // how long writers waited
	Elapsed      time.Duration    `json:"elapsed"`
}

// Rebuild replaces every projection with the fold of the events, while
// writers go on:
//
//  1. fold the log as of one snapshot, in memory;
//  2. COPY it into fresh tables in schema replay_rebuild, then build their
//     indexes (copied from the live tables) and ANALYZE them, the tables
//     side by side on connections of their own;
//  3. catch up without a lock: fold the events the snapshot could not see
//     onto the fresh tables, as often as needed for few to remain;
//  4. lock out writers (the projections ACCESS EXCLUSIVE, task_events
//     EXCLUSIVE), fold the last events, carry over the columns that are not
//     events (heartbeats), drop the live tables and move the fresh ones in,
//     all in one transaction. Only this step blocks anyone.
//
// It runs on a connection of its own that holds an advisory lock, so two
// rebuilds never race; ErrBusy when one is running.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, cfg RebuildConfig) (*RebuildReport, error) {
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 500 * time.Millisecond
	}
	if cfg.PartitionEvents <= 0 {
		cfg.PartitionEvents = DefaultPartitionEvents
	}
	start := time.Now()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("rebuild: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := setSession(ctx, conn); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(lockKey)).Scan(&locked); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if !locked {
		return nil, ErrBusy
	}
	// Unlocked before the connection closes: the server releases a closed
	// session's locks only after Close returns, so a rebuild right after
	// this one could still find the lock held.
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(lockKey))
	}()
	r := &rebuilder{conn: conn, cfg: cfg, tables: tables(), rep: &RebuildReport{Rows: map[string]int64{}}}
	if err := r.run(ctx); err != nil {
		r.cleanup(ctx)
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	r.rep.Elapsed = time.Since(start)
	return r.rep, nil
}

type rebuilder struct {
	conn    *pgx.Conn
	cfg     RebuildConfig
	tables  []table
	rep     *RebuildReport
	live    string // the live tables' schema
	seen    string // the pg_snapshot whose visible events the fresh tables hold
	maxWait time.Duration
	mu      sync.Mutex
}

func (r *rebuilder) run(ctx context.Context) error {
	if err := r.preflight(ctx); err != nil {
		return err
	}
	if err := r.createTables(ctx); err != nil {
		return err
	}
	if err := r.load(ctx); err != nil {
		return err
	}
	if err := r.indexAll(ctx); err != nil {
		return err
	}
	if err := deriveFreshKeys(ctx, r.conn); err != nil {
		return err
	}
	// Unlocked catch-up: each round folds what the previous snapshot could
	// not see; stop when little is left for the locked step.
	for range 5 {
		n, err := r.catchUp(ctx)
		if err != nil {
			return err
		}
		if n < 1000 {
			break
		}
	}
	return r.swap(ctx)
}

// preflight refuses what a swap cannot do: a foreign key or view would pin
// the old table, and a trigger would be lost with it.
func (r *rebuilder) preflight(ctx context.Context) error {
	if err := r.conn.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = 'worker_tasks'::regclass`).Scan(&r.live); err != nil {
		return fmt.Errorf("find the live schema: %w", err)
	}
	var deadlock float64
	if err := r.conn.QueryRow(ctx, `SELECT extract(epoch FROM current_setting('deadlock_timeout')::interval)`).Scan(&deadlock); err != nil {
		return fmt.Errorf("read deadlock_timeout: %w", err)
	}
	r.maxWait = max(2*time.Duration(deadlock*float64(time.Second)), r.cfg.LockTimeout)
	for _, name := range r.swapped() {
		var blockers []string
		rows, err := r.conn.Query(ctx, `
			SELECT 'foreign key ' || conname || ' on ' || conrelid::regclass::text FROM pg_constraint
			 WHERE contype = 'f' AND (confrelid = $1::regclass OR conrelid = $1::regclass)
			UNION ALL
			SELECT DISTINCT 'view ' || v.oid::regclass::text FROM pg_depend d
			  JOIN pg_rewrite w ON w.oid = d.objid JOIN pg_class v ON v.oid = w.ev_class
			 WHERE d.refobjid = $1::regclass AND v.oid <> $1::regclass
			UNION ALL
			SELECT 'trigger ' || tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal`,
			pgx.Identifier{r.live, name}.Sanitize())
		if err != nil {
			return fmt.Errorf("check %s: %w", name, err)
		}
		if blockers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("check %s: %w", name, err)
		}
		if len(blockers) > 0 {
			return fmt.Errorf("%s has %s, which a swap cannot carry over: drop it, rebuild, then recreate it",
				name, strings.Join(blockers, ", "))
		}
	}
	return nil
}

func (r *rebuilder) qualified(t table) string { return pgx.Identifier{r.live, t.name}.Sanitize() }
func (r *rebuilder) fresh(t table) string     { return pgx.Identifier{rebuildSchema, t.name}.Sanitize() }

// swapped names every table the swap replaces: the projections,
// task_counts, the sum tables and schedule_counts, in lock order (right
// after worker_tasks: every writer writes its counters right after the
// task rows).
func (r *rebuilder) swapped() []string {
	var out []string
	for _, t := range r.tables {
		out = append(out, t.name)
		if t.name == "worker_tasks" {
			out = append(out, countsTable, pendingTable)
			for _, u := range sumTables {
				out = append(out, u.Name)
			}
			out = append(out, scheduleCountsTable)
		}
	}
	return out
}

// createTables makes empty copies of the live tables (columns, defaults,
// generated columns, checks) without indexes: those are built after the
// load, which is much faster than maintaining them row by row.
func (r *rebuilder) createTables(ctx context.Context) error {
	return pgx.BeginFunc(ctx, r.conn, func(tx pgx.Tx) error {
		schema := pgx.Identifier{rebuildSchema}.Sanitize()
		if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
			return fmt.Errorf("drop leftover %s: %w", rebuildSchema, err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
			return fmt.Errorf("create %s: %w", rebuildSchema, err)
		}
		for _, name := range r.swapped() {
			fresh, live := pgx.Identifier{rebuildSchema, name}.Sanitize(), pgx.Identifier{r.live, name}.Sanitize()
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL EXCLUDING INDEXES)`,
				fresh, live)); err != nil {
				return fmt.Errorf("create %s: %w", fresh, err)
			}
		}
		return nil
	})
}

// load folds the log as of one snapshot, one range of streams at a time,
// and COPYs each range into the fresh tables while the next one is read:
// memory holds about two ranges, never the log. Each table is written on a
// connection of its own, one short transaction per range: nothing reads
// these tables yet, and short writes keep consumers' horizon moving
// (DESIGN §2). The totals of task_counts are the folded tasks'.
func (r *rebuilder) load(ctx context.Context) error {
	tx, err := r.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var total int64
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text, (SELECT count(*) FROM task_events)`).
		Scan(&r.seen, &total); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	cut := startPhase(r.cfg.Progress, "ranges", total)
	ranges, err := partitions(ctx, tx, total, r.cfg.PartitionEvents)
	if err != nil {
		return err
	}
	cut.report(total)
	conns := make([]*pgx.Conn, len(r.tables))
	for i := range conns {
		if conns[i], err = pgx.ConnectConfig(ctx, r.conn.Config().Copy()); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer conns[i].Close(context.WithoutCancel(ctx))
	}
	folds := make(chan *fold, 1)
	written := make(chan error, 1)
	var sum counts
	pending := projections.PendingCounts{}
	go func() { // the writer: one range at a time, its tables side by side
		var err error
		for f := range folds {
			if err == nil {
				err = r.write(ctx, conns, f)
			}
		}
		written <- err
	}()
	read := startPhase(r.cfg.Progress, "read", total)
	var readErr error
	for _, rg := range ranges {
		f, err := readRange(ctx, tx, rg, read)
		if err != nil {
			readErr = err
			break
		}
		read.base += f.events
		r.rep.Events += f.events
		r.rep.Skipped += f.skipped
		addFold(&sum, f)
		addPendingFold(pending, f)
		folds <- f
	}
	close(folds)
	if err := <-written; err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	args := make([]any, len(sum))
	for i, v := range sum {
		args[i] = v
	}
	_, err = r.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (pid, %s) VALUES (0, %s)`,
		pgx.Identifier{rebuildSchema, countsTable}.Sanitize(), strings.Join(countColumns, ", "),
		placeholders(1, len(countColumns))), args...)
	if err != nil {
		return fmt.Errorf("write %s: %w", countsTable, err)
	}
	r.rep.Rows[countsTable] = 1
	if err := addPending(ctx, r.conn, rebuildSchema, pending, false); err != nil {
		return err
	}
	r.rep.Rows[pendingTable] = int64(len(pending))
	if err := r.loadSums(ctx, r.seen); err != nil {
		return err
	}
	if err := r.loadScheduleCounts(ctx); err != nil {
		return err
	}
	if err := deriveGates(ctx, r.conn, `tt.gated`); err != nil {
		return err
	}
	return deriveDepsLeft(ctx, r.conn)
}

// write copies one fold's rows into the fresh tables.
func (r *rebuilder) write(ctx context.Context, conns []*pgx.Conn, f *fold) error {
	errs := make([]error, len(r.tables))
	var wg sync.WaitGroup
	for i, t := range r.tables {
		wg.Go(func() {
			errs[i] = pgx.BeginFunc(ctx, conns[i], func(tx pgx.Tx) error {
				n, err := copyRows(ctx, tx, pgx.Identifier{rebuildSchema, t.name}, t, f)
				if err == nil {
					r.addRows(t.name, n)
				}
				return err
			})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *rebuilder) addRows(table string, n int64) {
	r.mu.Lock()
	r.rep.Rows[table] += n
	r.mu.Unlock()
}

// addCounts adds c to the fresh task_counts (one row, pid 0, written by
// load).
func (r *rebuilder) addCounts(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, c counts) error {
	sets := make([]string, len(countColumns))
	args := make([]any, len(countColumns))
	for i, col := range countColumns {
		args[i] = c[i]
		sets[i] = fmt.Sprintf("%s = %s + $%d", col, col, i+1)
	}
	_, err := q.Exec(ctx, `UPDATE `+pgx.Identifier{rebuildSchema, countsTable}.Sanitize()+` SET `+strings.Join(sets, ", ")+` WHERE pid = 0`, args...)
	if err != nil {
		return fmt.Errorf("write %s: %w", countsTable, err)
	}
	return nil
}

func placeholders(from, n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("$%d", from+i)
	}
	return strings.Join(p, ", ")
}

// indexAll builds every fresh table's indexes, the tables side by side.
func (r *rebuilder) indexAll(ctx context.Context) error {
	names := r.swapped()
	p := startPhase(r.cfg.Progress, "index", int64(len(names)))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	var done atomic.Int64
	for i, name := range names {
		wg.Go(func() {
			conn, err := pgx.ConnectConfig(ctx, r.conn.Config().Copy())
			if err != nil {
				errs[i] = fmt.Errorf("connect: %w", err)
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			errs[i] = r.buildIndexes(ctx, conn, name)
			done.Add(1)
		})
	}
	wg.Wait()
	p.report(done.Load())
	return errors.Join(errs...)
}

// buildIndexes recreates every index and index-backed constraint of t's
// live table on the fresh one, under the same names, then analyzes it so
// the planner knows it the moment it goes live.
func (r *rebuilder) buildIndexes(ctx context.Context, conn *pgx.Conn, name string) error {
	live, fresh := pgx.Identifier{r.live, name}.Sanitize(), pgx.Identifier{rebuildSchema, name}.Sanitize()
	// pg_get_indexdef names the table the way quote_ident does.
	rows, err := conn.Query(ctx, `SELECT i.relname, pg_get_indexdef(i.oid), c.conname, pg_get_constraintdef(c.oid),
		       quote_ident(n.nspname) || '.' || quote_ident(tc.relname)
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_class tc ON tc.oid = x.indrelid JOIN pg_namespace n ON n.oid = tc.relnamespace
		LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid AND c.contype IN ('p', 'u', 'x')
		WHERE x.indrelid = $1::regclass ORDER BY x.indisprimary DESC, i.relname`, live)
	if err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}
	var stmts []string
	for rows.Next() {
		var name, def, tableName string
		var con, condef *string
		if err := rows.Scan(&name, &def, &con, &condef, &tableName); err != nil {
			rows.Close()
			return fmt.Errorf("read indexes: %w", err)
		}
		if con != nil {
			stmts = append(stmts, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`,
				fresh, pgx.Identifier{*con}.Sanitize(), *condef))
			continue
		}
		on := " ON " + tableName + " "
		if !strings.Contains(def, on) {
			rows.Close()
			return fmt.Errorf("index %s: cannot read its definition %q", name, def)
		}
		stmts = append(stmts, strings.Replace(def, on, " ON "+fresh+" ", 1))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}
	stmts = append(stmts, `ANALYZE `+fresh)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL maintenance_work_mem = '256MB'`); err != nil {
			return err
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
}

// afterSeen selects the events that r.seen could not see: those of
// transactions running or not yet begun when it was taken. Older
// transactions (below its xmin) had all ended, so the index on (tx_id, seq)
// bounds the scan.
const afterSeen = `tx_id >= pg_snapshot_xmin($1::text::pg_snapshot) AND NOT pg_visible_in_snapshot(tx_id, $1::text::pg_snapshot)`

// catchUp folds again, in one REPEATABLE READ transaction, the streams
// that have events r.seen could not see, replaces their rows in the fresh
// tables, and returns how many such events there were.
func (r *rebuilder) catchUp(ctx context.Context) (int64, error) {
	tx, err := r.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, fmt.Errorf("begin catch-up: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var now string
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&now); err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	n, rows, err := r.applyDelta(ctx, tx, startPhase(r.cfg.Progress, "catch-up", 0))
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit catch-up: %w", err)
	}
	r.seen = now
	r.rep.CaughtUp += n
	r.mergeRows(rows)
	return n, nil
}

// applyDelta refolds, in tx, every stream with events after r.seen from
// its first event (so no fold is kept between steps), and replaces the
// rows of those streams in the fresh tables and their share of
// task_counts. It returns the new events and the change in rows per table,
// which the caller counts once tx commits.
func (r *rebuilder) applyDelta(ctx context.Context, tx pgx.Tx, p *phase) (int64, map[string]int64, error) {
	var ids []string
	var n int64
	rows, err := tx.Query(ctx, `SELECT stream_id::text, count(*) FROM task_events WHERE `+afterSeen+` GROUP BY stream_id`, r.seen)
	if err != nil {
		return 0, nil, fmt.Errorf("catch up: %w", err)
	}
	var id string
	var c int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &c}, func() error {
		ids = append(ids, id)
		n += c
		return nil
	}); err != nil {
		return 0, nil, fmt.Errorf("catch up: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil, nil
	}
	f := newFold()
	if err := readEvents(ctx, tx, f, `stream_id = ANY($1::uuid[])`, []any{ids}, p); err != nil {
		return 0, nil, err
	}
	var delta counts
	addFold(&delta, f)
	pendingDelta := projections.PendingCounts{}
	addPendingFold(pendingDelta, f)
	runs := runsOf(f)
	if _, err := addRuns(ctx, tx, runs, -1); err != nil {
		return 0, nil, err
	}
	changed := map[string]int64{}
	for _, t := range r.tables {
		del := `DELETE FROM ` + r.fresh(t) + ` WHERE ` + pgx.Identifier{t.stream}.Sanitize() + ` = ANY($1::uuid[])`
		if t.name == "worker_tasks" {
			gone, err := tx.Query(ctx, del+` RETURNING status, assigned_to IS NULL, retry_outcome, scheduled, task_type_id::text, priority`, ids)
			if err != nil {
				return 0, nil, fmt.Errorf("catch up %s: %w", t.name, err)
			}
			var old events.Task
			var unassigned bool
			var deleted int64
			if _, err := pgx.ForEachRow(gone, []any{&old.Status, &unassigned, &old.RetryOutcome, &old.Scheduled,
				&old.TaskTypeID, &old.Priority}, func() error {
				old.AssignedTo = nil
				if !unassigned {
					old.AssignedTo = &id
				}
				delta.Add(&old, -1)
				pendingDelta.Add(&old, -1)
				deleted++
				return nil
			}); err != nil {
				return 0, nil, fmt.Errorf("catch up %s: %w", t.name, err)
			}
			changed[t.name] -= deleted
		} else {
			tag, err := tx.Exec(ctx, del, ids)
			if err != nil {
				return 0, nil, fmt.Errorf("catch up %s: %w", t.name, err)
			}
			changed[t.name] -= tag.RowsAffected()
		}
		added, err := copyRows(ctx, tx, pgx.Identifier{rebuildSchema, t.name}, t, f)
		if err != nil {
			return 0, nil, fmt.Errorf("catch up: %w", err)
		}
		changed[t.name] += added
	}
	if err := r.addCounts(ctx, tx, delta); err != nil {
		return 0, nil, err
	}
	if err := addPending(ctx, tx, rebuildSchema, pendingDelta, true); err != nil {
		return 0, nil, err
	}
	sums, err := r.addSumsDelta(ctx, tx)
	if err != nil {
		return 0, nil, err
	}
	for name, n := range sums {
		changed[name] += n
	}
	added, err := addRuns(ctx, tx, runs, 1)
	if err != nil {
		return 0, nil, err
	}
	changed[scheduleCountsTable] += added
	if err := deriveDeltaGates(ctx, tx, f); err != nil {
		return 0, nil, err
	}
	if err := deriveDepsLeft(ctx, tx); err != nil {
		return 0, nil, err
	}
	if err := deriveDeltaFreshKeys(ctx, tx, f); err != nil {
		return 0, nil, err
	}
	return n, changed, nil
}

func (r *rebuilder) mergeRows(changed map[string]int64) {
	for t, n := range changed {
		r.addRows(t, n)
	}
}

// swap is the only step that blocks writers. A lock wait that times out
// (or loses a deadlock with a writer that took its locks in another order)
// rolls back, catches up once more without locks and tries again, waiting
// longer each time up to twice deadlock_timeout (RebuildConfig.LockTimeout):
// the work done so far is kept, however long the locks stay busy.
func (r *rebuilder) swap(ctx context.Context) error {
	p := startPhase(r.cfg.Progress, "swap", 1)
	wait := r.cfg.LockTimeout
	for attempt := 1; ; attempt++ {
		r.rep.LockAttempts = attempt
		held, err := r.trySwap(ctx, wait)
		if err == nil {
			r.rep.LockHeld = held
			p.report(1)
			return nil
		}
		var pgErr *pgconn.PgError
		retry := errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
		if !retry || (r.cfg.LockAttempts > 0 && attempt >= r.cfg.LockAttempts) {
			return fmt.Errorf("swap (attempt %d): %w", attempt, err)
		}
		wait = min(2*wait, r.maxWait)
		backoff := time.Duration(min(attempt, 10)) * 50 * time.Millisecond
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		if _, err := r.catchUp(ctx); err != nil {
			return err
		}
	}
}

func (r *rebuilder) trySwap(ctx context.Context, wait time.Duration) (time.Duration, error) {
	tx, err := r.conn.Begin(ctx) // READ COMMITTED: each statement sees every commit before it
	if err != nil {
		return 0, fmt.Errorf("begin swap: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, wait.Milliseconds())); err != nil {
		return 0, err
	}
	// Lock in the order writers do: the projections first (ACCESS
	// EXCLUSIVE, for the swap), then the log (EXCLUSIVE: it waits out every
	// transaction that is appending and blocks new appends, while history
	// reads go on). The store writes a command's projection rows before its
	// events (store/append.go), so this order makes no cycle with a writer
	// that is halfway through its batch.
	names := r.swapped()
	live := make([]string, len(names))
	for i, name := range names {
		live[i] = pgx.Identifier{r.live, name}.Sanitize()
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(live, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE task_events IN EXCLUSIVE MODE`); err != nil {
		return 0, err
	}
	lockedAt := time.Now()
	n, changed, err := r.applyDelta(ctx, tx, nil)
	if err != nil {
		return 0, err
	}
	if err := r.carryOver(ctx, tx); err != nil {
		return 0, err
	}
	if err := r.dropPruned(ctx, tx); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+strings.Join(live, ", ")); err != nil {
		return 0, fmt.Errorf("drop the live tables: %w", err)
	}
	for _, name := range names {
		if _, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{rebuildSchema, name}.Sanitize()+` SET SCHEMA `+pgx.Identifier{r.live}.Sanitize()); err != nil {
			return 0, fmt.Errorf("move %s in: %w", name, err)
		}
	}
	if _, err := tx.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{rebuildSchema}.Sanitize()); err != nil {
		return 0, fmt.Errorf("drop %s: %w", rebuildSchema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit swap: %w", err)
	}
	held := time.Since(lockedAt)
	r.rep.CaughtUp += n
	r.mergeRows(changed)
	return held, nil
}

// carryOver copies the live columns that are not events (a worker's
// heartbeat) onto the fresh rows with the same key. Writers are locked out,
// so nothing changes them in between.
func (r *rebuilder) carryOver(ctx context.Context, tx pgx.Tx) error {
	for _, t := range r.tables {
		rows, err := tx.Query(ctx, `SELECT attname FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
			ORDER BY attnum`, r.qualified(t))
		if err != nil {
			return fmt.Errorf("columns of %s: %w", t.name, err)
		}
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("columns of %s: %w", t.name, err)
		}
		var sets []string
		for _, c := range cols {
			if !slices.Contains(t.columns, c) && !slices.Contains(t.derived, c) {
				q := pgx.Identifier{c}.Sanitize()
				sets = append(sets, q+" = l."+q)
			}
		}
		if len(sets) == 0 {
			continue
		}
		var on []string
		for _, k := range t.key {
			q := pgx.Identifier{k}.Sanitize()
			on = append(on, "l."+q+" = f."+q)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s f SET %s FROM %s l WHERE %s`,
			r.fresh(t), strings.Join(sets, ", "), r.qualified(t), strings.Join(on, " AND "))); err != nil {
			return fmt.Errorf("carry over %s: %w", t.name, err)
		}
	}
	return nil
}

// dropPruned deletes from the fresh tables the rows the live ones pruned
// on purpose (table.pruned), as recorded when the swap locks them.
func (r *rebuilder) dropPruned(ctx context.Context, tx pgx.Tx) error {
	for _, t := range r.tables {
		if t.pruned == nil {
			continue
		}
		history := pgx.Identifier{r.live, "schedule_history"}.Sanitize()
		if _, err := tx.Exec(ctx, `DELETE FROM `+r.fresh(t)+` r WHERE `+t.pruned(history)); err != nil {
			return fmt.Errorf("drop the pruned rows of %s: %w", t.name, err)
		}
	}
	return nil
}

// cleanup drops the half-built tables of a failed rebuild.
func (r *rebuilder) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = r.conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{rebuildSchema}.Sanitize()+` CASCADE`)
}
