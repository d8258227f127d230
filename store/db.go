package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawdbot/task-service/events"
)

// Querier is what both *pgxpool.Pool and pgx.Tx offer. Every write has a
// variant that takes the caller's transaction through it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Projector queues the read-model writes for events being appended, given
// each stream's state before them (nil for a new stream) and after. Package
// projections implements it. Task also keeps task_counts from the change
// between the two, so before must be the state the projection row holds.
type Projector interface {
	Task(b *pgx.Batch, before, after *events.Task, evs []events.Envelope)
	// NewTasks queues the rows of tasks being created (their creation's
	// events evs) in a few multi-row statements: the rows Task would write.
	NewTasks(b *pgx.Batch, tasks []*events.Task, evs []events.Envelope) error
	TaskType(b *pgx.Batch, before, after *events.TaskType, evs []events.Envelope)
	User(b *pgx.Batch, before, after *events.User, evs []events.Envelope)
	Schedule(b *pgx.Batch, before, after *events.Schedule, evs []events.Envelope)
	FreshnessRule(b *pgx.Batch, before, after *events.FreshnessRule, evs []events.Envelope)
	Workflow(b *pgx.Batch, before, after *events.Workflow, evs []events.Envelope)
}

// Config configures a DB.
type Config struct {
	Projector Projector
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// AfterCommit runs after every committed write (wakes reactors
	// in-process), with the event types it wrote when the writer knows
	// them (Hub.Wake).
	AfterCommit func(types ...string)
	// Notifier, when set, lets a create's own transaction carry the NOTIFY
	// that announces it when one is due at once (Notifier.carry, ADR 032);
	// such a commit calls the notifier instead of AfterCommit, which should
	// be its Committed.
	Notifier *Notifier
	// AfterUnblock runs after the commit when a batch of completions
	// committed that made blocked tasks pending, and after a create that
	// made a pool task claimable at once: a hint that a waiting claim may take
	// one now (Hub.Unblocked). Nothing when nil.
	AfterUnblock func()
	// Registerer receives the store's metrics (store/metrics.go); none when nil.
	Registerer prometheus.Registerer
	// OfflineAfter is how long a silent worker still counts as online in
	// read models before the stuck detector says so (default 10 minutes).
	OfflineAfter time.Duration
	// ScheduleMinInterval is the shortest interval a schedule may have
	// (default 1 minute; only tests lower it).
	ScheduleMinInterval time.Duration
	// Prices price LLM usage reported without a cost
	// (events.DefaultPrices when nil).
	Prices events.Prices
	// Day is the team's day that usage totals and budgets count in (UTC,
	// turning at midnight, when zero).
	Day events.TeamDay
	// FreshnessMinAge is the shortest max age a freshness rule may have
	// (default 1 minute; only tests lower it).
	FreshnessMinAge time.Duration
}

// Conn is the pool as the store's statements see it: inside a request's
// transaction (ContextWithTx) every statement joins that transaction. A
// request that holds a transaction then never waits on the pool for a
// second connection, which under concurrent requests would starve them all
// (each holding one connection, waiting for another).
type Conn struct{ *pgxpool.Pool }

func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if tx := txOf(ctx); tx != nil {
		return tx.Exec(ctx, sql, args...)
	}
	return c.Pool.Exec(ctx, sql, args...)
}

func (c *Conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if tx := txOf(ctx); tx != nil {
		return tx.Query(ctx, sql, args...)
	}
	return c.Pool.Query(ctx, sql, args...)
}

func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if tx := txOf(ctx); tx != nil {
		return tx.QueryRow(ctx, sql, args...)
	}
	return c.Pool.QueryRow(ctx, sql, args...)
}

func (c *Conn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if tx := txOf(ctx); tx != nil {
		return tx.SendBatch(ctx, b)
	}
	return c.Pool.SendBatch(ctx, b)
}

// DB is the store.
type DB struct {
	pool         *Conn
	projector    Projector
	now          func() time.Time
	afterCommit  func(types ...string)
	afterUnblock func()
	notifier     *Notifier // nil: no transaction carries a NOTIFY
	offlineAfter time.Duration
	marks        logMarks // log_marks, the log's time bounds (marks.go)
	checkpoints  sync.Map // reactor name -> events.Position last seen (Pending)

	scheduleMinInterval time.Duration
	prices              events.Prices
	day                 events.TeamDay
	freshnessMinAge     time.Duration

	metrics *storeMetrics
	txMu    sync.Mutex
	txHooks map[pgx.Tx][]func() // run at WithTx's commit (onCommit)
	// txCarry: the transactions WithTx began and will commit: zero, or
	// what they carried (carryNotify).
	txCarry map[pgx.Tx]carriedNotify

	claims *batcher[claimRequest, []*TaskWithType]
	// limited is whether the last claim saw an unpaused limited type, so
	// the next one runs with the limited branch (runClaims). It starts
	// true: the first claim finds out.
	limited     atomic.Bool
	completions *batcher[completeRequest, *events.Task]
	creations   *batcher[createRequest, *events.Task]
	// holderChecks are the batched lane's checks that a worker holds the
	// tasks it finishes (checkHolder).
	holderChecks *batcher[holderCheck, map[string]bool]
	// bulkCreates holds a slot for each CreateTasks call writing now.
	bulkCreates chan struct{}
	// titles is the sample of titles the search picks its rare words
	// from (title_search.go); nil until the first search reads it.
	titles atomic.Pointer[titleSample]
}

// batchMax bounds the commands in one batched claim or completion (ADR 008).
const batchMax = 64

// completionBatchMax bounds the completions in one batch: the batched lane
// (ADR 016) brings up to 100 a request, and a batch costs one statement and
// one commit however many it holds.
const completionBatchMax = 1000

// New wraps an open pool.
func New(pool *pgxpool.Pool, cfg Config) (*DB, error) {
	if cfg.Projector == nil {
		return nil, errors.New("store: Config.Projector is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterCommit == nil {
		cfg.AfterCommit = func(...string) {}
	}
	if cfg.AfterUnblock == nil {
		cfg.AfterUnblock = func() {}
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = 10 * time.Minute
	}
	if cfg.ScheduleMinInterval <= 0 {
		cfg.ScheduleMinInterval = events.DefaultMinInterval
	}
	if cfg.Prices == nil {
		cfg.Prices = events.DefaultPrices()
	}
	db := &DB{pool: &Conn{pool}, projector: cfg.Projector, now: cfg.Now, afterCommit: cfg.AfterCommit,
		afterUnblock: cfg.AfterUnblock, offlineAfter: cfg.OfflineAfter, scheduleMinInterval: cfg.ScheduleMinInterval, freshnessMinAge: cfg.FreshnessMinAge,
		txHooks: map[pgx.Tx][]func(){}, txCarry: map[pgx.Tx]carriedNotify{}, prices: cfg.Prices, day: cfg.Day, notifier: cfg.Notifier}
	var err error
	if db.metrics, err = newStoreMetrics(cfg.Registerer, pool); err != nil {
		return nil, err
	}
	db.limited.Store(true)
	db.claims = newBatcher(batchMax, func(r claimRequest) string { return r.worker }, db.claimBatch)
	db.completions = newBatcher(completionBatchMax, func(r completeRequest) string { return r.id }, db.completeBatch)
	db.creations = newBatcher(batchMax, nil, db.createBatch)
	db.holderChecks = newBatcher(batchMax, nil, db.checkHolders)
	db.bulkCreates = make(chan struct{}, bulkCreateSlots)
	return db, nil
}

// Connect opens a pool for url with sizes fit for the service.
func Connect(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// Pool is the pool, for readiness checks, tools and the store's read
// functions that take a Querier.
func (db *DB) Pool() *Conn { return db.pool }

// Now is the store's clock.
func (db *DB) Now() time.Time { return db.now().UTC().Truncate(time.Microsecond) }

// WithTx runs fn in one transaction, committing when it returns nil. It
// always rolls back on the way out, under a context that survives the
// caller's cancellation, so a cancelled request still cleans up. Inside a
// transaction ctx carries (ContextWithTx), fn runs in that one.
func (db *DB) WithTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if tx := txOf(ctx); tx != nil { // the request's transaction (ContextWithTx)
		return fn(tx)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	db.txMu.Lock()
	db.txCarry[tx] = carriedNotify{}
	db.txMu.Unlock()
	defer func() {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		db.takeHooks(tx)
		db.takeCarried(tx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return mapErr(fmt.Errorf("commit: %w", err))
	}
	for _, hook := range db.takeHooks(tx) {
		hook()
	}
	if c, ok := db.takeCarried(tx); ok {
		// Its other writes' hooks woke theirs; NoEvents wakes those
		// that follow more than events, as below.
		db.notifier.carriedCommit(c.at, append(slices.Clip(c.types), NoEvents)...)
	} else {
		// Its events' writes woke their subscribers (wrote); this wakes
		// those that follow more than events (an outbox, the claim gate).
		db.afterCommit(NoEvents)
	}
	return nil
}

// carryNotify queues the NOTIFY in b, the last statements a create sends
// through q, when the notifier says one is due at once and q commits soon
// after b: the pool (b is its own implicit transaction), or a transaction
// WithTx began (its commit follows fn), the request's included
// (ContextWithTx: the Go client sends every create with an
// Idempotency-Key). Not a savepoint nor a transaction begun elsewhere,
// whose commit is not WithTx's to report. When ok, the caller calls
// carried after b succeeds: at once on the pool, at its commit for a
// transaction (WithTx then reports it to the notifier instead of
// AfterCommit).
// types are the event types b writes.
func (db *DB) carryNotify(ctx context.Context, q Querier, b *pgx.Batch, types []string, claimable bool) (carried func(), ok bool) {
	if db.notifier == nil {
		return nil, false
	}
	tx, inTx := q.(pgx.Tx)
	if !inTx {
		if q != Querier(db.pool) {
			return nil, false
		}
		tx = txOf(ctx) // Conn sends b in the request's transaction, if any
		inTx = tx != nil
	}
	if inTx {
		db.txMu.Lock()
		_, began := db.txCarry[tx]
		db.txMu.Unlock()
		if !began {
			return nil, false
		}
	}
	at, payload, ok := db.notifier.carry(types, claimable)
	if !ok {
		return nil, false
	}
	b.Queue(notifyStatement, Channel, payload)
	if !inTx {
		return func() { db.notifier.carriedCommit(at, types...) }, true
	}
	return func() {
		db.txMu.Lock()
		db.txCarry[tx] = carriedNotify{at: at, types: types}
		db.txMu.Unlock()
	}, true
}

// carriedNotify is a transaction's carried NOTIFY: when the notifier let
// it carry one (zero: it did not), and the event types of its write.
type carriedNotify struct {
	at    time.Time
	types []string
}

// takeCarried forgets tx, WithTx's, and returns when the notifier let it
// carry its NOTIFY, if it did.
func (db *DB) takeCarried(tx pgx.Tx) (c carriedNotify, ok bool) {
	db.txMu.Lock()
	defer db.txMu.Unlock()
	c = db.txCarry[tx]
	delete(db.txCarry, tx)
	return c, !c.at.IsZero()
}

// WithTxRetrying is WithTx for a command that reads what it decides on in
// fn: after a lost race (another write to a stream fn wrote committed
// first) it runs fn again on what is there now, as UpdateTask does. Inside
// the request's transaction (ContextWithTx) each attempt is a savepoint of
// it, so a lost attempt spoils nothing else.
func (db *DB) WithTxRetrying(ctx context.Context, fn func(tx pgx.Tx) error) error {
	outer := txOf(ctx)
	for attempt := 1; ; attempt++ {
		var err error
		if outer != nil {
			err = db.Savepoint(ctx, outer, func(ctx context.Context) error { return fn(txOf(ctx)) })
		} else {
			err = db.WithTx(ctx, fn)
		}
		if errors.Is(err, events.ErrConflict) && attempt < maxRaces {
			continue
		}
		return err
	}
}

// ScheduleMinInterval is the shortest interval a schedule may have (the
// API's document states it).
func (db *DB) ScheduleMinInterval() time.Duration { return db.scheduleMinInterval }

// FreshnessMinAge is the shortest max age a freshness rule may have.
func (db *DB) FreshnessMinAge() time.Duration {
	if db.freshnessMinAge <= 0 {
		return events.DefaultMinFreshAge
	}
	return db.freshnessMinAge
}
