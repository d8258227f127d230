package whatif

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/events"
)

// Config says what to simulate.
type Config struct {
	Policy *Policy
	// Since is how far back the window starts (at most MaxSince).
	Since time.Duration
	// SampleSize bounds the changed chains listed (default 20, at most 1000).
	SampleSize int
	// MaxOpenChains bounds the retry chains held open at once (default
	// DefaultMaxOpenChains); a window that holds more is an
	// *OpenChainsError.
	MaxOpenChains int
	// Progress, optional, is called every progressEvery events read.
	Progress func(done, total int64, elapsed time.Duration)
}

// DefaultMaxOpenChains bounds a run's memory, which follows the chains it
// holds open (ADR 030: 937,322 open chains peaked at 590 MB, about 0.6 KB
// each): 200,000 keep a run near 130 MB, which one instance can spare for
// its one what-if at a time, while a fleet's real month, whose chains end
// within minutes, stays far below it.
const DefaultMaxOpenChains = 200_000

// OpenChainsError says the window held more chains open at once than
// Config.MaxOpenChains allows: a shorter window holds fewer.
type OpenChainsError struct {
	Max int
	At  time.Time // when the window reached it
}

func (e *OpenChainsError) Error() string {
	return fmt.Sprintf("the window holds more than %d retry chains open at once (reached by the events of %s), and each is held in memory until it ends",
		e.Max, e.At.Format(time.RFC3339))
}

const progressEvery = 16384

// Run simulates cfg.Policy over the window: it reads the log, writes
// nothing. A type named in the policy that does not exist is a
// *events.ValidationError.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Report, error) {
	if cfg.Policy == nil {
		cfg.Policy = &Policy{}
	}
	if cfg.Since <= 0 || cfg.Since > MaxSince {
		return nil, events.Invalid("since", "must be more than zero and at most 366d")
	}
	if cfg.SampleSize <= 0 {
		cfg.SampleSize = 20
	}
	cfg.SampleSize = min(cfg.SampleSize, 1000)
	if cfg.MaxOpenChains <= 0 {
		cfg.MaxOpenChains = DefaultMaxOpenChains
	}
	start := time.Now()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("what-if: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	r := &run{cfg: cfg, sim: &sim{silences: map[string][]silence{}, maxRetries: map[string]int{}},
		open: map[string]taskRef{}, byType: map[string]*ChainCounts{}, typeName: map[string]string{}, names: map[string]string{}}
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&r.sim.until); err != nil {
		return nil, fmt.Errorf("what-if: %w", err)
	}
	r.sim.until = r.sim.until.UTC()
	cutoff := r.sim.until.Add(-cfg.Since)
	if err := r.loadTypes(ctx, tx); err != nil {
		return nil, err
	}
	if err := r.loadSilences(ctx, tx, cutoff.Add(-7*24*time.Hour)); err != nil {
		return nil, err
	}
	first, last, err := seqRange(ctx, tx, cutoff)
	if err != nil {
		return nil, err
	}
	if err := r.readTasks(ctx, tx, first, last, cutoff, start); err != nil {
		return nil, err
	}
	// Chains still open at the end of the window: a chain is keyed by
	// each of its tasks, so finish it once, by its root.
	for id, ref := range r.open {
		if id == ref.c.root {
			r.finish(ref.c)
		}
	}
	el := time.Since(start)
	policy, err := json.Marshal(cfg.Policy)
	if err != nil {
		return nil, err
	}
	rep := &Report{Since: cutoff, Until: r.sim.until, Policy: policy, Events: r.events, Partial: r.partial, CompactedTasks: r.compactedTasks,
		ElapsedSeconds: el.Seconds(), Totals: r.totals, Types: sortedTypes(r.byType), Sample: r.sample}
	if el > 0 {
		rep.EventsPerSec = float64(r.events) / el.Seconds()
	}
	if rep.Sample == nil {
		rep.Sample = []ChangedChain{}
	}
	if rep.Totals.Recorded == nil {
		rep.Totals.Recorded, rep.Totals.Simulated = map[string]int64{}, map[string]int64{}
	}
	return rep, nil
}

type run struct {
	cfg      Config
	sim      *sim
	open     map[string]taskRef // every task of the chains not ended yet
	chains   int                // the chains not ended yet
	typeName map[string]string  // type id -> name
	names    map[string]string  // type name -> id
	totals   ChainCounts
	byType   map[string]*ChainCounts
	sample   []ChangedChain
	sampleAt []time.Time // each sampled chain's first task's creation
	events   int64
	// compactedTasks: tasks simulated from their task.compacted summary.
	compactedTasks int64
	partial        int64
}

func (r *run) loadTypes(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT id::text, name, max_retries FROM task_types`)
	if err != nil {
		return fmt.Errorf("what-if: task types: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name string
		var maxRetries int
		if err := rows.Scan(&id, &name, &maxRetries); err != nil {
			return fmt.Errorf("what-if: task types: %w", err)
		}
		r.typeName[id], r.names[name], r.sim.maxRetries[id] = name, id, maxRetries
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("what-if: task types: %w", err)
	}
	for _, name := range sortedKeys(r.cfg.Policy.Types) {
		if _, ok := r.names[name]; !ok {
			return events.Invalid("types."+name, "no task type is named %q", name)
		}
	}
	return nil
}

// loadSilences reads the workers' recorded silences from after.
func (r *run) loadSilences(ctx context.Context, tx pgx.Tx, after time.Time) error {
	rows, err := tx.Query(ctx, `SELECT stream_id::text, type, occurred_at,
		       coalesce(data->>'last_heartbeat', ''), coalesce(data->>'last_claim', ''), coalesce(data->>'threshold_seconds', '')
		  FROM task_events
		 WHERE type IN ('worker.went_offline', 'worker.went_online') AND occurred_at >= $1
		 ORDER BY seq`, after)
	if err != nil {
		return fmt.Errorf("what-if: worker silences: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var worker, typ, hb, claim, threshold string
		var at time.Time
		if err := rows.Scan(&worker, &typ, &at, &hb, &claim, &threshold); err != nil {
			return fmt.Errorf("what-if: worker silences: %w", err)
		}
		ss := r.sim.silences[worker]
		if typ == "worker.went_online" {
			if n := len(ss); n > 0 && ss[n-1].to.IsZero() {
				ss[n-1].to = at
			}
			continue
		}
		secs, _ := strconv.Atoi(threshold)
		th := time.Duration(secs) * time.Second
		from := parseTime(hb)
		if from.IsZero() {
			from = parseTime(claim)
		}
		if from.IsZero() {
			from = at.Add(-orDefault(th, defaultOffline))
		}
		r.sim.silences[worker] = append(ss, silence{from: from, threshold: th})
	}
	return rows.Err()
}

// seqRange finds the first event at or after cutoff by bisecting seq
// (occurred_at grows with seq but for commits that raced), so the read
// walks only the window's part of the primary key.
func seqRange(ctx context.Context, tx pgx.Tx, cutoff time.Time) (int64, int64, error) {
	var lo, hi int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(min(seq), 0), coalesce(max(seq), 0) FROM task_events`).Scan(&lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("what-if: event range: %w", err)
	}
	last := hi
	for lo < hi {
		mid := lo + (hi-lo)/2
		var at time.Time
		err := tx.QueryRow(ctx, `SELECT occurred_at FROM task_events WHERE seq >= $1 ORDER BY seq LIMIT 1`, mid).Scan(&at)
		if err != nil {
			return 0, 0, fmt.Errorf("what-if: event range: %w", err)
		}
		if at.Before(cutoff) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, last, nil
}

var taskEventTypes = []string{"task.created", "task.claimed", "task.released", "task.completed", "task.failed",
	"task.cancelled", "task.retried", "task.retry_skipped", "task.retries_exhausted", "task.compacted"}

// readTasks streams the window's task events in seq order. Only the
// fields deciding needs leave the server.
func (r *run) readTasks(ctx context.Context, tx pgx.Tx, first, last int64, cutoff, start time.Time) error {
	rows, err := tx.Query(ctx, `SELECT seq, tx_id::text::bigint, stream_id::text, type, occurred_at,
		       coalesce(data->>'task_type_id', ''), coalesce(data->>'retry_count', ''), coalesce(data->>'parent_task_id', ''),
		       coalesce(data->>'available_at', ''), coalesce(data->>'worker_id', ''), coalesce(data->>'kind', ''),
		       coalesce(data->>'reason', ''), coalesce(data->'evidence'->>'last_heartbeat', ''),
		       coalesce(data->'evidence'->>'offline_threshold_seconds', ''), coalesce(data->'evidence'->>'stuck_threshold_seconds', ''),
		       coalesce(data->>'manual', ''), CASE WHEN type = 'task.compacted' THEN data END
		  FROM task_events
		 WHERE seq >= $1 AND seq <= $2 AND stream_type = 'task' AND type = ANY($3) AND occurred_at >= $4
		 ORDER BY seq`, first, last, taskEventTypes, cutoff)
	if err != nil {
		return fmt.Errorf("what-if: read events: %w", err)
	}
	defer rows.Close()
	var e row
	var txID int64
	var compacted []byte
	// The task.compacted events of one compaction transaction are its
	// chains, whole: they are simulated together once that transaction's
	// events are read (store/whatif/compacted.go).
	var group compactedGroup
	for rows.Next() {
		if err := rows.Scan(&e.seq, &txID, &e.task, &e.typ, &e.at, &e.typeID, &e.retryCount, &e.parent, &e.availableAt,
			&e.worker, &e.kind, &e.reason, &e.lastHeartbeat, &e.offline, &e.stuck, &e.manual, &compacted); err != nil {
			return fmt.Errorf("what-if: read events: %w", err)
		}
		e.at = e.at.UTC()
		if e.typ == "task.compacted" {
			if txID != group.tx {
				if err := r.applyCompacted(&group, cutoff); err != nil {
					return err
				}
				group.tx = txID
			}
			if err := group.add(e.task, compacted); err != nil {
				return err
			}
		} else {
			e.unsure = 0
			r.apply(&e)
			r.events++
		}
		if r.chains > r.cfg.MaxOpenChains {
			return &OpenChainsError{Max: r.cfg.MaxOpenChains, At: e.at}
		}
		if r.cfg.Progress != nil && r.events%progressEvery == 0 {
			r.cfg.Progress(e.seq-first, last-first, time.Since(start))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("what-if: read events: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.applyCompacted(&group, cutoff); err != nil {
		return err
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(last-first, last-first, time.Since(start))
	}
	return nil
}

// taskRef is a task's attempt in its chain.
type taskRef struct {
	c *chain
	i int
}

type row struct {
	seq                                                 int64
	task, typ                                           string
	at                                                  time.Time
	typeID, retryCount, parent, availableAt             string
	worker, kind, reason, lastHeartbeat, offline, stuck string
	manual                                              string
	// unsure: rebuilt from a compaction that did not keep what deciding
	// on it may need (unsureDecision, unsureEvidence).
	unsure uint8
}

// apply folds one event into its chain; a chain that reaches its final
// outcome is compared and dropped at once, so memory holds open chains.
func (r *run) apply(e *row) {
	if e.typ == "task.created" {
		r.created(e)
		return
	}
	ref, ok := r.open[e.task]
	if !ok {
		r.partial++
		return
	}
	c, a := ref.c, &ref.c.attempts[ref.i]
	switch e.typ {
	case "task.claimed":
		a.worker, a.claimedAt = e.worker, e.at
	case "task.released":
		a.worker, a.claimedAt = "", time.Time{}
	case "task.completed":
		a.end, a.endAt = endCompleted, e.at
	case "task.cancelled":
		a.end, a.endAt = endCancelled, e.at
	case "task.failed":
		a.end, a.endAt, a.failKind = endFailed, e.at, e.kind
		a.unsure |= e.unsure
		if tp, ok := r.cfg.Policy.Types[r.typeName[c.typeID]]; ok {
			a.permanent = tp.permanent(e.kind, e.reason)
		}
		if e.kind == events.FailureWorkerOffline {
			a.lastHeartbeat = parseTime(e.lastHeartbeat)
			a.offlineOld = seconds(e.offline)
			a.stuckOld = seconds(e.stuck)
		}
	case "task.retried":
		a.unsure |= e.unsure
		a.decision = decRetried
		if e.manual == "true" {
			a.decision = decManual
		}
	case "task.retries_exhausted":
		a.decision = decExhausted
	case "task.retry_skipped":
		a.unsure |= e.unsure
		a.decision = decAdvised
		if fixedSkip(e.reason) {
			a.decision = decFixed
		}
	}
	if c.done() {
		r.finish(c)
	}
}

// created starts a chain, or adds a retry to its parent's.
func (r *run) created(e *row) {
	n, _ := strconv.Atoi(e.retryCount)
	a := attempt{retryNumber: n, createdAt: e.at, availableAt: parseTime(e.availableAt)}
	if ref, ok := r.open[e.parent]; ok && e.parent != "" && ref.i == len(ref.c.attempts)-1 && ref.c.last().end == endFailed {
		c := ref.c
		c.attempts = append(c.attempts, a)
		c.ids = append(c.ids, e.task)
		r.open[e.task] = taskRef{c, len(c.attempts) - 1}
		return
	}
	c := &chain{root: e.task, typeID: e.typeID, attempts: []attempt{a}, ids: []string{e.task}}
	r.open[e.task] = taskRef{c, 0}
	r.chains++
}

// finish compares a chain's recorded and simulated paths and drops it.
func (r *run) finish(c *chain) {
	for _, id := range c.ids {
		delete(r.open, id)
	}
	r.chains--
	name := r.typeName[c.typeID]
	if name == "" {
		name = c.typeID
	}
	var tp *TypePolicy
	if p, ok := r.cfg.Policy.Types[name]; ok {
		tp = &p
	}
	tc := r.byType[name]
	if tc == nil {
		tc = &ChainCounts{}
		r.byType[name] = tc
	}
	if c.unjudged(tp, r.cfg.Policy.WorkerOfflineAfter) {
		r.totals.NotJudged++
		tc.NotJudged++
		return
	}
	rec := r.sim.walk(c, nil, nil)
	sim := r.sim.walk(c, tp, r.cfg.Policy.WorkerOfflineAfter)
	changes := r.totals.tally(rec, sim)
	tc.tally(rec, sim)
	if len(changes) > 0 {
		r.keepSample(newChange(c, name, rec, sim, changes), c.attempts[0].createdAt)
	}
}

// keepSample keeps the SampleSize changed chains whose first task was
// created first (then by its id), whatever the order in which the chains
// ended: a chain rebuilt from a compaction ends where the compaction is
// in the log, not where its events were.
func (r *run) keepSample(ch ChangedChain, created time.Time) {
	less := func(i int) bool {
		c := r.sampleAt[i].Compare(created)
		return c < 0 || c == 0 && r.sample[i].RootTaskID < ch.RootTaskID
	}
	i := sort.Search(len(r.sample), func(i int) bool { return !less(i) })
	if i >= r.cfg.SampleSize {
		return
	}
	if len(r.sample) == r.cfg.SampleSize {
		r.sample, r.sampleAt = r.sample[:len(r.sample)-1], r.sampleAt[:len(r.sampleAt)-1]
	}
	r.sample = slices.Insert(r.sample, i, ch)
	r.sampleAt = slices.Insert(r.sampleAt, i, created)
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

func seconds(s string) time.Duration {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return time.Duration(n) * time.Second
}
