package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// LockTimeout bounds each wait for the final locks (default 500ms, below
	// PostgreSQL's default deadlock_timeout of 1s so that in a lock cycle
	// with a writer the rebuild gives up first and the writer goes on).
	LockTimeout time.Duration
	// LockAttempts bounds how often the final step is tried (default 20).
	LockAttempts int
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
	if cfg.LockAttempts <= 0 {
		cfg.LockAttempts = 20
	}
	start := time.Now()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("rebuild: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(lockKey)).Scan(&locked); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if !locked {
		return nil, ErrBusy
	}
	r := &rebuilder{conn: conn, cfg: cfg, tables: tables(), rep: &RebuildReport{Rows: map[string]int64{}}}
	if err := r.run(ctx); err != nil {
		r.cleanup(ctx)
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	r.rep.Elapsed = time.Since(start)
	return r.rep, nil
}

type rebuilder struct {
	conn   *pgx.Conn
	cfg    RebuildConfig
	tables []table
	rep    *RebuildReport
	live   string // the live tables' schema
	base   *fold
	seen   string // the pg_snapshot whose visible events base holds
}

func (r *rebuilder) run(ctx context.Context) error {
	if err := r.preflight(ctx); err != nil {
		return err
	}
	if err := r.foldSnapshot(ctx); err != nil {
		return err
	}
	if err := r.createTables(ctx); err != nil {
		return err
	}
	if err := r.loadTables(ctx); err != nil {
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

// preflight refuses what a swap would silently lose or cannot do: triggers
// are not copied, and a foreign key or view would pin the old table.
func (r *rebuilder) preflight(ctx context.Context) error {
	if err := r.conn.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = 'worker_tasks'::regclass`).Scan(&r.live); err != nil {
		return fmt.Errorf("find the live schema: %w", err)
	}
	for _, t := range r.tables {
		var blockers []string
		rows, err := r.conn.Query(ctx, `
			SELECT 'trigger ' || tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal
			UNION ALL
			SELECT 'foreign key ' || conname || ' on ' || conrelid::regclass::text FROM pg_constraint
			 WHERE contype = 'f' AND (confrelid = $1::regclass OR conrelid = $1::regclass)
			UNION ALL
			SELECT DISTINCT 'view ' || v.oid::regclass::text FROM pg_depend d
			  JOIN pg_rewrite w ON w.oid = d.objid JOIN pg_class v ON v.oid = w.ev_class
			 WHERE d.refobjid = $1::regclass AND v.oid <> $1::regclass`, r.qualified(t))
		if err != nil {
			return fmt.Errorf("check %s: %w", t.name, err)
		}
		if blockers, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("check %s: %w", t.name, err)
		}
		if len(blockers) > 0 {
			return fmt.Errorf("%s has %s, which a swap cannot carry over: drop it, rebuild, then recreate it",
				t.name, strings.Join(blockers, ", "))
		}
	}
	return nil
}

func (r *rebuilder) qualified(t table) string { return pgx.Identifier{r.live, t.name}.Sanitize() }
func (r *rebuilder) fresh(t table) string     { return pgx.Identifier{rebuildSchema, t.name}.Sanitize() }

// foldSnapshot folds every event visible to one snapshot and remembers it.
func (r *rebuilder) foldSnapshot(ctx context.Context) error {
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
	r.base = newFold(nil)
	if err := readEvents(ctx, tx, r.base, "true", nil, startPhase(r.cfg.Progress, "read", total)); err != nil {
		return err
	}
	r.rep.Events, r.rep.Skipped = r.base.events, r.base.skipped
	return tx.Commit(ctx)
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
		for _, t := range r.tables {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL EXCLUDING INDEXES)`,
				r.fresh(t), r.qualified(t))); err != nil {
				return fmt.Errorf("create %s: %w", r.fresh(t), err)
			}
		}
		return nil
	})
}

// loadTables fills each fresh table and then builds its indexes, each
// table on a connection of its own, side by side: one table's COPY (mostly
// the client encoding rows) overlaps another's index builds (the server
// sorting). Each step is its own short transaction: nothing reads these
// tables yet, and short writes keep consumers' horizon moving (DESIGN §2).
func (r *rebuilder) loadTables(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		table   string
		rows    int64
		indexed bool
		err     error
	}
	results := make(chan result, 2*len(r.tables))
	var wg sync.WaitGroup
	var total int64
	for _, t := range r.tables {
		n, _ := t.rows(r.base)
		total += int64(n)
		wg.Go(func() {
			conn, err := pgx.ConnectConfig(ctx, r.conn.Config().Copy())
			if err != nil {
				results <- result{table: t.name, err: fmt.Errorf("connect: %w", err)}
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			var n int64
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				n, err = copyRows(ctx, tx, pgx.Identifier{rebuildSchema, t.name}, t, r.base)
				return err
			})
			if err != nil {
				results <- result{table: t.name, err: err}
				return
			}
			results <- result{table: t.name, rows: n}
			results <- result{table: t.name, indexed: true, err: r.buildIndexes(ctx, conn, t)}
		})
	}
	go func() { // ends with the last loader; the loop below waits for it
		wg.Wait()
		close(results)
	}()
	write := startPhase(r.cfg.Progress, "write", total)
	var index *phase
	var done int64
	var copied, indexed int
	var firstErr error
	for res := range results {
		switch {
		case res.err != nil:
			if firstErr == nil {
				firstErr = fmt.Errorf("load %s: %w", res.table, res.err)
				cancel()
			}
		case res.indexed:
			indexed++
			if index != nil {
				index.report(int64(indexed))
			}
		default:
			r.rep.Rows[res.table] = res.rows
			done += res.rows
			write.report(done)
			if copied++; copied == len(r.tables) {
				index = startPhase(r.cfg.Progress, "index", int64(len(r.tables)))
				index.report(int64(indexed))
			}
		}
	}
	if firstErr != nil {
		return firstErr
	}
	r.base.dropRows()
	return nil
}

// buildIndexes recreates every index and index-backed constraint of t's
// live table on the fresh one, under the same names, then analyzes it so
// the planner knows it the moment it goes live.
func (r *rebuilder) buildIndexes(ctx context.Context, conn *pgx.Conn, t table) error {
	// pg_get_indexdef names the table the way quote_ident does.
	rows, err := conn.Query(ctx, `SELECT i.relname, pg_get_indexdef(i.oid), c.conname, pg_get_constraintdef(c.oid),
		       quote_ident(n.nspname) || '.' || quote_ident(tc.relname)
		FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_class tc ON tc.oid = x.indrelid JOIN pg_namespace n ON n.oid = tc.relnamespace
		LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid AND c.contype IN ('p', 'u', 'x')
		WHERE x.indrelid = $1::regclass ORDER BY x.indisprimary DESC, i.relname`, r.qualified(t))
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
				r.fresh(t), pgx.Identifier{*con}.Sanitize(), *condef))
			continue
		}
		on := " ON " + tableName + " "
		if !strings.Contains(def, on) {
			rows.Close()
			return fmt.Errorf("index %s: cannot read its definition %q", name, def)
		}
		stmts = append(stmts, strings.Replace(def, on, " ON "+r.fresh(t)+" ", 1))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}
	stmts = append(stmts, `ANALYZE `+r.fresh(t))
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

// catchUp folds, in one REPEATABLE READ transaction, the events committed
// since r.seen onto the fresh tables, and returns how many there were.
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
	d, err := r.applyDelta(ctx, tx, startPhase(r.cfg.Progress, "catch-up", 0))
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit catch-up: %w", err)
	}
	r.base.merge(d)
	r.seen = now
	r.rep.CaughtUp += d.events
	return d.events, nil
}

// applyDelta folds the events after r.seen into a delta of r.base and
// writes it to the fresh tables in tx; the caller merges it after commit.
func (r *rebuilder) applyDelta(ctx context.Context, tx pgx.Tx, p *phase) (*fold, error) {
	d := newFold(r.base)
	if err := readEvents(ctx, tx, d, afterSeen, []any{r.seen}, p); err != nil {
		return nil, err
	}
	for _, t := range r.tables {
		if t.aggregate {
			ids := t.ids(d)
			if len(ids) == 0 {
				continue
			}
			if _, err := tx.Exec(ctx, `DELETE FROM `+r.fresh(t)+` WHERE id = ANY($1::uuid[])`, ids); err != nil {
				return nil, fmt.Errorf("catch up %s: %w", t.name, err)
			}
		}
		n, err := copyRows(ctx, tx, pgx.Identifier{rebuildSchema, t.name}, t, d)
		if err != nil {
			return nil, fmt.Errorf("catch up: %w", err)
		}
		if !t.aggregate {
			r.rep.Rows[t.name] += n
		}
	}
	d.dropRows()
	return d, nil
}

// swap is the only step that blocks writers. A lock wait that times out
// (or loses a deadlock with a writer that took its locks in another order)
// rolls back, catches up once more without locks and tries again.
func (r *rebuilder) swap(ctx context.Context) error {
	p := startPhase(r.cfg.Progress, "swap", 1)
	for attempt := 1; ; attempt++ {
		r.rep.LockAttempts = attempt
		held, err := r.trySwap(ctx)
		if err == nil {
			r.rep.LockHeld = held
			for _, t := range r.tables {
				if t.aggregate {
					r.rep.Rows[t.name] = int64(len(t.ids(r.base)))
				}
			}
			p.report(1)
			return nil
		}
		var pgErr *pgconn.PgError
		retry := errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
		if !retry || attempt >= r.cfg.LockAttempts {
			return fmt.Errorf("swap (attempt %d): %w", attempt, err)
		}
		backoff := time.Duration(attempt) * 50 * time.Millisecond
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

func (r *rebuilder) trySwap(ctx context.Context) (time.Duration, error) {
	tx, err := r.conn.Begin(ctx) // READ COMMITTED: each statement sees every commit before it
	if err != nil {
		return 0, fmt.Errorf("begin swap: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, r.cfg.LockTimeout.Milliseconds())); err != nil {
		return 0, err
	}
	// Lock in the order writers do: the projections first (ACCESS
	// EXCLUSIVE, for the swap), then the log (EXCLUSIVE: it waits out every
	// transaction that is appending and blocks new appends, while history
	// reads go on). The store writes a command's projection rows before its
	// events (store/append.go), so this order makes no cycle with a writer
	// that is halfway through its batch.
	live := make([]string, len(r.tables))
	for i, t := range r.tables {
		live[i] = r.qualified(t)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(live, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE task_events IN EXCLUSIVE MODE`); err != nil {
		return 0, err
	}
	lockedAt := time.Now()
	d, err := r.applyDelta(ctx, tx, nil)
	if err != nil {
		return 0, err
	}
	if err := r.carryOver(ctx, tx); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+strings.Join(live, ", ")); err != nil {
		return 0, fmt.Errorf("drop the live tables: %w", err)
	}
	for _, t := range r.tables {
		if _, err := tx.Exec(ctx, `ALTER TABLE `+r.fresh(t)+` SET SCHEMA `+pgx.Identifier{r.live}.Sanitize()); err != nil {
			return 0, fmt.Errorf("move %s in: %w", t.name, err)
		}
	}
	if _, err := tx.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{rebuildSchema}.Sanitize()); err != nil {
		return 0, fmt.Errorf("drop %s: %w", rebuildSchema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit swap: %w", err)
	}
	held := time.Since(lockedAt)
	r.base.merge(d)
	r.rep.CaughtUp += d.events
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
			if !slices.Contains(t.columns, c) {
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

// cleanup drops the half-built tables of a failed rebuild.
func (r *rebuilder) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = r.conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{rebuildSchema}.Sanitize()+` CASCADE`)
}
