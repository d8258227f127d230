package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/cmd/internal/settings"
	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
)

// backgroundConfig configures what runs beside the API: the listener and
// NOTIFY sender, the reactors and the stuck detector.
type backgroundConfig struct {
	reactors      bool
	stuckDetector bool
	catchUp       time.Duration
	notifyEvery   time.Duration
	stuckTick     time.Duration
	offlineAfter  time.Duration
	stuckAfter    time.Duration

	monitor opsConfig

	anthropicKey     string
	anthropicBaseURL string
	anthropicModel   string
	anthropicTimeout time.Duration

	telegram telegramConfig
	digest   digestConfig

	// Schedules (issue 13).
	scheduler        bool
	schedulerCatchUp time.Duration
	// scheduleMinInterval lowers the one-minute floor of schedule
	// intervals; only tests set it (TASK_SERVICE_TEST_MIN_SCHEDULE_INTERVAL).
	scheduleMinInterval time.Duration
	// What each schedule's history keeps, and how often it is pruned.
	scheduleHistoryDays  int
	scheduleHistoryRuns  int
	scheduleHistoryEvery time.Duration

	// Freshness rules: tasks for stale keys.
	freshness        bool
	freshnessCatchUp time.Duration
	// freshnessMinAge lowers the one-minute floor of a rule's max age;
	// only tests set it (TASK_SERVICE_TEST_MIN_FRESHNESS_AGE).
	freshnessMinAge time.Duration

	// The event log's retention by compaction and its archive (ADR 035).
	eventRetentionText string
	eventRetention     time.Duration // 0: off
	eventPartition     string
	compactionEvery    time.Duration
	compactionBatch    int
	compactionPause    time.Duration
	compactionShare    float64
}

func (c *backgroundConfig) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.reactors, "reactors", true, "run the reactors (retry, telegram, schedule failures) on this instance (env REACTORS)")
	fs.BoolVar(&c.stuckDetector, "stuck-detector", true, "run the stuck detector on this instance (env STUCK_DETECTOR)")
	fs.DurationVar(&c.catchUp, "reactor-catch-up", 5*time.Second, "reactors re-read the log this often even without a wake (env REACTOR_CATCH_UP)")
	fs.DurationVar(&c.notifyEvery, "notify-interval", 50*time.Millisecond, "spacing of a busy instance's NOTIFYs to other instances; a commit after a tenth of it without commits is announced at once (env NOTIFY_INTERVAL)")
	fs.DurationVar(&c.stuckTick, "stuck-tick", 60*time.Second, "how often the stuck detector looks (env STUCK_TICK)")
	fs.DurationVar(&c.offlineAfter, "worker-offline-after", 10*time.Minute, "a worker silent this long is offline (env WORKER_OFFLINE_AFTER)")
	fs.DurationVar(&c.stuckAfter, "task-stuck-after", 15*time.Minute, "a task in progress this long with an offline worker is failed for retry (env TASK_STUCK_AFTER)")
	// The key has no flag twin: command lines show up in ps.
	c.anthropicKey = os.Getenv("ANTHROPIC_API_KEY")
	fs.StringVar(&c.anthropicBaseURL, "anthropic-base-url", "https://api.anthropic.com", "Anthropic API address; retry advice is on when ANTHROPIC_API_KEY is set (env ANTHROPIC_BASE_URL)")
	fs.StringVar(&c.anthropicModel, "anthropic-model", "claude-sonnet-4-5", "model for retry advice (env ANTHROPIC_MODEL)")
	fs.DurationVar(&c.anthropicTimeout, "anthropic-timeout", 10*time.Second, "timeout of one retry-advice call (env ANTHROPIC_TIMEOUT)")
	c.telegram.register(fs)
	c.digest.register(fs)
	fs.BoolVar(&c.scheduler, "scheduler", true, "fire due schedules on this instance (env SCHEDULER)")
	fs.DurationVar(&c.schedulerCatchUp, "scheduler-catch-up", 30*time.Second, "the scheduler looks for due schedules this often even without a wake (env SCHEDULER_CATCH_UP)")
	fs.IntVar(&c.scheduleHistoryDays, "schedule-history-days", 30, "a schedule's executions fired more than this many days ago are pruned from its history; its stats keep counting them (env SCHEDULE_HISTORY_DAYS)")
	fs.IntVar(&c.scheduleHistoryRuns, "schedule-history-runs", 100, "a schedule's history keeps its last this many executions at most; its stats keep counting the others (env SCHEDULE_HISTORY_RUNS)")
	fs.DurationVar(&c.scheduleHistoryEvery, "schedule-history-prune-interval", 10*time.Minute, "how often an instance that runs the scheduler prunes schedule histories (env SCHEDULE_HISTORY_PRUNE_INTERVAL)")
	fs.BoolVar(&c.freshness, "freshness", true, "create the tasks of freshness rules for stale keys on this instance (env FRESHNESS)")
	fs.DurationVar(&c.freshnessCatchUp, "freshness-catch-up", 30*time.Second, "freshness rules are looked at this often even without a wake (env FRESHNESS_CATCH_UP)")
	c.monitor.register(fs)
	fs.StringVar(&c.eventRetentionText, "event-retention", "", "past this age (days, such as 90d, at least 1d) a finished retry chain's events are archived and replaced by one task.compacted event per task; unset keeps every event (env EVENT_RETENTION)")
	settings.Choice(fs, &c.eventPartition, "event-partition", "day", []string{"day", "week"}, "the event log's period, UTC day or ISO week: one partition of task_events (made ahead by the service) and one archive object per period (env EVENT_PARTITION)")
	fs.DurationVar(&c.compactionEvery, "event-compaction-interval", 10*time.Minute, "how often an instance archives ended periods and compacts, when EVENT_RETENTION is set (env EVENT_COMPACTION_INTERVAL)")
	fs.IntVar(&c.compactionBatch, "event-compaction-batch", 100, "retry chains one compaction transaction looks at (env EVENT_COMPACTION_BATCH)")
	fs.DurationVar(&c.compactionPause, "event-compaction-pause", 20*time.Millisecond, "least pause after each compaction transaction (env EVENT_COMPACTION_PAUSE)")
	fs.Float64Var(&c.compactionShare, "event-compaction-share", store.DefaultCompactionShare, "most of its time compaction spends in transactions, and the archive writing periods, from 0.01 to 1: after each it rests long enough, leaving the database to the readers (env EVENT_COMPACTION_SHARE)")
}

// checkCompaction reads EVENT_RETENTION (days, or a Go duration) and
// refuses a retention under a day and bounds that would do nothing.
func (c *backgroundConfig) checkCompaction() error {
	var errs []error
	if v := strings.TrimSpace(c.eventRetentionText); v != "" {
		d, err := parseRetention(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("EVENT_RETENTION=%q: want a number of days such as 90d (or a duration such as 2160h); leave it unset to keep every event", v))
		case d < store.MinRetention:
			errs = append(errs, fmt.Errorf("EVENT_RETENTION=%s: want at least a day (1d), such as 90d; leave it unset to keep every event", v))
		default:
			c.eventRetention = d
		}
	}
	if c.compactionEvery < time.Second {
		errs = append(errs, fmt.Errorf("EVENT_COMPACTION_INTERVAL=%s: want a duration of at least 1s, such as 10m", c.compactionEvery))
	}
	if c.compactionBatch < 1 || c.compactionBatch > 10_000 {
		errs = append(errs, fmt.Errorf("EVENT_COMPACTION_BATCH=%d: want a whole number from 1 to 10000", c.compactionBatch))
	}
	if !(c.compactionShare >= 0.01 && c.compactionShare <= 1) {
		errs = append(errs, fmt.Errorf("EVENT_COMPACTION_SHARE=%v: want a share of the time from 0.01 to 1, such as 0.25", c.compactionShare))
	}
	return errors.Join(errs...)
}

// parseRetention reads 90d (whole days) or a Go duration (2160h).
func parseRetention(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*366 {
			return 0, fmt.Errorf("not a number of days: %q", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// checkScheduleHistory refuses limits that would keep nothing.
func (c *backgroundConfig) checkScheduleHistory() error {
	var errs []error
	if c.scheduleHistoryDays < 1 {
		errs = append(errs, fmt.Errorf("SCHEDULE_HISTORY_DAYS=%d: want a whole number of days, at least 1", c.scheduleHistoryDays))
	}
	if c.scheduleHistoryRuns < 1 {
		errs = append(errs, fmt.Errorf("SCHEDULE_HISTORY_RUNS=%d: want a whole number of executions, at least 1", c.scheduleHistoryRuns))
	}
	if c.scheduleHistoryEvery < time.Second {
		errs = append(errs, fmt.Errorf("SCHEDULE_HISTORY_PRUNE_INTERVAL=%s: want a duration of at least 1s, such as 10m", c.scheduleHistoryEvery))
	}
	return errors.Join(errs...)
}

// readTestKnobs reads the two settings only tests use (no flag twins, so
// --help stays about running the service), as strictly as the flags.
func (c *backgroundConfig) readTestKnobs(lookup func(string) (string, bool)) error {
	var err1, err2 error
	c.scheduleMinInterval, err1 = settings.EnvDuration(lookup, "TASK_SERVICE_TEST_MIN_SCHEDULE_INTERVAL")
	c.freshnessMinAge, err2 = settings.EnvDuration(lookup, "TASK_SERVICE_TEST_MIN_FRESHNESS_AGE")
	return errors.Join(err1, err2)
}

// background owns the instance's long-running goroutines and stops them in
// order: first the workers of the log (reactors, stuck detector, after the
// batch or tick they are in), then the NOTIFY sender (one last NOTIFY) and
// the listener.
type background struct {
	instanceID string
	hub        *store.Hub
	notifier   *store.Notifier
	listener   *store.Listener
	// telegram is the outbox's sender when this instance runs the
	// reactors: an answer to a command pokes it.
	telegram *reactors.TelegramSender
	// data is the task-data store, where the event archive goes too.
	data blob.Store

	workers []func(context.Context) error // stopped first
	infra   []func(context.Context) error // stopped last

	stopWorkers, stopInfra context.CancelFunc
	workersDone, infraDone sync.WaitGroup
}

// newBackground builds the hub, the NOTIFY sender and the listener: the
// store needs the sender's Committed as its AfterCommit before anything else.
func newBackground(cfg config, pool store.Querier, reg prometheus.Registerer, log zerolog.Logger) (*background, error) {
	id, err := instanceID()
	if err != nil {
		return nil, err
	}
	b := &background{instanceID: id, hub: store.NewHub()}
	b.notifier, err = store.NewNotifier(store.NotifierConfig{Querier: pool, Hub: b.hub, InstanceID: id,
		Interval: cfg.bg.notifyEvery, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	b.listener, err = store.NewListener(store.ListenerConfig{URL: cfg.databaseURL, Hub: b.hub, InstanceID: id, Logger: log,
		Registerer: reg})
	if err != nil {
		return nil, err
	}
	b.infra = append(b.infra, b.notifier.Run, b.listener.Run)
	return b, nil
}

// addWorkers builds the reactors and the stuck detector the flags ask for.
func (b *background) addWorkers(cfg config, db *store.DB, reg prometheus.Registerer, log zerolog.Logger) error {
	bg := cfg.bg
	if bg.reactors {
		var advisor reactors.Advisor
		if bg.anthropicKey != "" {
			claude, err := reactors.NewClaude(reactors.ClaudeConfig{APIKey: bg.anthropicKey, BaseURL: bg.anthropicBaseURL,
				Model: bg.anthropicModel, Timeout: bg.anthropicTimeout})
			if err != nil {
				return err
			}
			advisor = claude
			log.Info().Str("model", bg.anthropicModel).Msg("retry advice from Claude is on")
		}
		retry, err := reactors.NewRetry(reactors.RetryConfig{DB: db, Advisor: advisor, InstanceID: b.instanceID,
			Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
		rs := retry.Reactors()
		// Schedules whose executions keep failing pause themselves (ADR 013).
		rs = append(rs, reactors.ScheduleFailures(db, log))
		// A type whose LLM usage today reached a budget pauses (ADR 021).
		rs = append(rs, reactors.NewBudgetReactor(db, log))

		// Telegram: the reactor records notifications in the runner's
		// transactions; the sender delivers them (and stops with the reactors).
		tgReactor, tgSender, err := bg.telegram.build(db.Pool().Pool, b.hub, reg, log)
		if err != nil {
			return err
		}
		rs = append(rs, tgReactor)
		b.workers = append(b.workers, tgSender.Run)
		b.telegram = tgSender
		if err := bg.addDigest(b, db, log); err != nil {
			return err
		}

		runner, err := reactors.NewRunner(reactors.RunnerConfig{DB: db, Hub: b.hub, InstanceID: b.instanceID,
			Reactors: rs, CatchUp: bg.catchUp, Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
		b.workers = append(b.workers, runner.Run)
	}
	if bg.scheduler {
		sched, err := reactors.NewScheduler(reactors.SchedulerConfig{DB: db, Hub: b.hub, Check: api.NewParamsCheck(),
			CatchUp: bg.schedulerCatchUp, Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
		b.workers = append(b.workers, sched.Run)
		history, err := reactors.NewScheduleHistory(reactors.ScheduleHistoryConfig{DB: db, Every: bg.scheduleHistoryEvery,
			Limits: store.HistoryLimits{Days: bg.scheduleHistoryDays, Runs: bg.scheduleHistoryRuns}, Logger: log})
		if err != nil {
			return err
		}
		b.workers = append(b.workers, history.Run)
	}
	if bg.eventRetention > 0 {
		comp, err := reactors.NewCompaction(reactors.CompactionConfig{DB: db, Store: b.data, Retention: bg.eventRetention,
			Period: bg.eventPartition, Every: bg.compactionEvery, Batch: bg.compactionBatch, Pause: bg.compactionPause, Share: bg.compactionShare,
			Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
		b.workers = append(b.workers, comp.Run)
		log.Info().Str("retention", bg.eventRetention.String()).Str("period", bg.eventPartition).
			Msg("event retention is on: finished chains past it are archived and compacted")
	}
	if bg.freshness {
		fresh, err := reactors.NewFreshness(reactors.FreshnessConfig{DB: db, Hub: b.hub, Check: api.NewParamsCheck(),
			CatchUp: bg.freshnessCatchUp, Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
		b.workers = append(b.workers, fresh.Run)
	}
	// Every instance runs a due timer: it wakes this instance's long-polling
	// claims when a scheduled task's run_at comes.
	due, err := reactors.NewDueTimer(reactors.DueTimerConfig{DB: db, Hub: b.hub, CatchUp: bg.schedulerCatchUp,
		Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	b.workers = append(b.workers, due.Run)
	// Every instance keeps the log's partitions ahead; an advisory lock
	// lets one pass at a time work.
	parts, err := reactors.NewPartitions(reactors.PartitionsConfig{DB: db, Policy: bg.partitionPolicy(b.data),
		Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	b.workers = append(b.workers, parts.Run)
	// The monitor runs on every instance: its gauges are cluster-wide, and
	// an instance that serves only the API still shows a stall.
	monitor, err := reactors.NewMonitor(reactors.MonitorConfig{DB: db, Interval: bg.monitor.interval,
		StallWarnAfter: bg.monitor.stallWarnAfter, StallAlertAfter: bg.monitor.stallAlertAfter,
		Telegram: bg.telegram.reactorConfig(), Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	b.workers = append(b.workers, monitor.Run)
	// Every instance may resume the types a budget paused, at the day's
	// turn; the type's stream lets only one resume happen.
	days, err := reactors.NewBudgetDays(reactors.BudgetDaysConfig{DB: db, Check: cfg.usage.budgetCheck, Logger: log})
	if err != nil {
		return err
	}
	b.workers = append(b.workers, days.Run)
	if bg.stuckDetector {
		stuck, err := reactors.NewStuck(reactors.StuckConfig{DB: db, InstanceID: b.instanceID, Tick: bg.stuckTick,
			OfflineAfter: bg.offlineAfter, StuckAfter: bg.stuckAfter, Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
		b.workers = append(b.workers, stuck.Run)
	}
	return nil
}

// partitionPolicy: two daily partitions ahead, or one weekly one (every
// instance makes them hourly; a read that names no upper time probes
// each, so fewer cost less, ADR 034);
// with EVENT_RETENTION, a partition past it is dropped once empty and
// archived (its periods' manifests in the task-data store), and sparse
// ones past it merged (ADR 034).
func (bg backgroundConfig) partitionPolicy(data blob.Store) store.PartitionPolicy {
	pol := store.PartitionPolicy{Kind: bg.eventPartition, Ahead: 2}
	if bg.eventPartition == archive.Week {
		pol.Ahead = 1
	}
	if bg.eventRetention > 0 && data != nil {
		pol.Retention = bg.eventRetention
		pol.MergeBelow = 10_000
		pol.Archived = func(ctx context.Context, kind string, start time.Time) (bool, error) {
			_, err := archive.ReadManifest(ctx, data, archive.Period{Kind: kind, Start: start})
			if errors.Is(err, blob.ErrNotFound) {
				return false, nil
			}
			return err == nil, err
		}
	}
	return pol
}

// start runs everything; ctx is only the parent, stop ends them.
func (b *background) start(ctx context.Context, log zerolog.Logger) {
	run := func(ctx context.Context, wg *sync.WaitGroup, fns []func(context.Context) error) {
		for _, fn := range fns {
			wg.Go(func() {
				if err := fn(ctx); err != nil {
					log.Error().Err(err).Msg("background task ended with an error")
				}
			})
		}
	}
	infraCtx, stopInfra := context.WithCancel(context.WithoutCancel(ctx))
	workersCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	b.stopInfra, b.stopWorkers = stopInfra, stopWorkers
	run(infraCtx, &b.infraDone, b.infra)
	run(workersCtx, &b.workersDone, b.workers)
}

// stop ends the workers (each after its current batch or tick), then the
// NOTIFY sender and the listener.
func (b *background) stop() {
	b.stopWorkers()
	b.workersDone.Wait()
	b.stopInfra()
	b.infraDone.Wait()
}

// instanceID names this process in leases and NOTIFY payloads.
func instanceID() (string, error) {
	host, _ := os.Hostname()
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r[:])), nil
}

// opsConfig configures the monitor: sampling and horizon stall thresholds.
type opsConfig struct {
	interval, stallWarnAfter, stallAlertAfter time.Duration
}

func (c *opsConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&c.interval, "metrics-sample-interval", 15*time.Second,
		"how often the cluster-wide gauges (queue depth, workers, outbox, xid horizon) are read (env METRICS_SAMPLE_INTERVAL)")
	fs.DurationVar(&c.stallWarnAfter, "stall-warn-after", time.Minute,
		"a transaction holding back the xid horizon this long is logged as a warning every minute (env STALL_WARN_AFTER)")
	fs.DurationVar(&c.stallAlertAfter, "stall-alert-after", 5*time.Minute,
		"past this, the stall is sent to Telegram once (env STALL_ALERT_AFTER)")
}

// addDigest runs the daily digest where the reactors run, when Telegram is
// on and DIGEST_AT is not off.
func (bg backgroundConfig) addDigest(b *background, db *store.DB, log zerolog.Logger) error {
	if !bg.telegram.enabled || bg.digest.off() {
		log.Info().Msg("daily digest is off (it needs Telegram on and DIGEST_AT not off)")
		return nil
	}
	sched, err := bg.digest.schedule(db.Day().Loc)
	if err != nil {
		return err
	}
	d, err := reactors.NewDigest(reactors.DigestConfig{DB: db, Schedule: sched, ChatID: bg.telegram.chatID, Logger: log})
	if err != nil {
		return err
	}
	log.Info().Str("at", sched.At.String()).Str("time_zone", sched.Loc.String()).Msg("daily digest is on")
	b.workers = append(b.workers, d.Run)
	return nil
}

// pokeTelegram makes this instance's sender look at the outbox on the next
// wake: an answer to a command was queued.
func (b *background) pokeTelegram() {
	if b.telegram != nil {
		b.telegram.Poke()
	}
}
