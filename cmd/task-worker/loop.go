package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// Reasons the worker gives when it releases tasks.
const (
	reasonRestarted = "worker restarted; released task left from a previous run"
	reasonLostClaim = "worker lost the answer to its claim (network error or shutdown); released it unstarted"
	reasonShutdown  = "worker shutting down: the command was stopped after the grace period; released for another worker"
	reasonNotHeld   = "the service has this task in progress under the worker, which does not run it (a completion lost in a database failover?); released it"
)

// maxHeartbeatMeta keeps heartbeat metadata under the service's 16 KB limit.
const maxHeartbeatMeta = 12 << 10

// reportGrace is how long reports may still be retried after running
// commands were stopped at shutdown, before the worker gives up and exits
// (an unreported task is released by the next start).
const reportGrace = 30 * time.Second

// Worker claims tasks into its slots, runs them and reports them.
type Worker struct {
	cfg     *Config
	log     zerolog.Logger
	api     *apiClient
	version string
	limits  updateLimits
	pid     int
	host    string
	started time.Time
	state   runState
	key     string // identifies this worker's commands: see killLeftovers

	// claimMu serializes claims across slots: one claim (one long-poll) is
	// in flight per process, and a sweep never races a claim whose answer
	// is on its way.
	claimMu   sync.Mutex
	needSweep bool // guarded by claimMu: a claim may have succeeded unseen
	// serviceHeld is how many tasks the last heartbeat's answer said are in
	// progress under this worker (-1: none to act on). More than the slots
	// and ready run means a sweep: see sweepIfServiceHoldsMore.
	serviceHeld atomic.Int64
	sweepReason string        // guarded by claimMu: the release reason for that sweep
	claimWait   time.Duration // guarded by claimMu: 0 once the server refused ?wait
	longPolled  bool          // guarded by claimMu: the server held an empty claim open
	// ready holds tasks one claim brought beyond the claiming slot's own,
	// for the other free slots (guarded by claimMu). claimOne is set once
	// the service turned out to have no batched claim.
	ready    []*claimedTask
	claimOne bool

	finishes finisher

	mu     sync.Mutex
	slots  []slotState
	hbWake chan struct{}

	cancelRun context.CancelCauseFunc
	kill      context.CancelFunc
}

// slotState is what one slot is doing.
type slotState struct {
	TaskID string
	Title  string
	Type   string
	Since  time.Time
}

// errFatal marks errors that stop the worker (exit 1) rather than being
// retried: wrong credentials, an account that is not a worker.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

// NewWorker prepares a worker; Run starts it.
func NewWorker(cfg *Config, log zerolog.Logger, version string) *Worker {
	host, _ := os.Hostname()
	sum := sha256.Sum256([]byte(cfg.API + "\x00" + cfg.Email + "\x00" + cfg.WorkDir))
	return &Worker{cfg: cfg, log: log, api: newAPIClient(cfg, log), version: version, key: hex.EncodeToString(sum[:8]),
		limits: defaultUpdateLimits(), claimWait: cfg.ClaimWait, pid: os.Getpid(), host: host, slots: make([]slotState, cfg.Slots),
		hbWake: make(chan struct{}, 1)}
}

// Abort skips the rest of the shutdown grace period: running commands are
// stopped now and their tasks released. Safe to call at any time.
func (w *Worker) Abort() {
	w.mu.Lock()
	kill := w.kill
	w.mu.Unlock()
	if kill != nil {
		kill()
	}
}

// Run works until ctx ends (then shuts down gracefully) or a fatal error.
// Every task it claimed is completed, failed or released before it returns,
// unless the service stayed unreachable to the end (the next start then
// releases what is left).
func (w *Worker) Run(ctx context.Context) error {
	w.started = time.Now()
	w.state = loadRunState(w.cfg.WorkDir, w.cfg.Email, w.log)
	if n := killLeftovers(w.key); n > 0 {
		w.log.Warn().Int("processes", n).Msg("killed commands a previous run of this worker left running")
	}
	if err := w.startup(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped before it ever worked: nothing to hand back.
			w.log.Info().Err(err).Msg("stopped during start-up")
			w.state.CleanExit = true
			w.state.save(w.log)
			return nil
		}
		return err
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	killCtx, kill := context.WithCancel(context.WithoutCancel(ctx))
	defer kill()
	reportCtx, stopReports := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReports()
	w.mu.Lock()
	w.cancelRun, w.kill = cancelRun, kill
	w.mu.Unlock()

	slotsDone := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		w.shutdownTimers(runCtx, killCtx, slotsDone, kill, stopReports)
	}()
	hbCtx, stopHeartbeats := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer bg.Done()
		w.heartbeats(hbCtx)
	}()

	w.log.Info().Int("slots", w.cfg.Slots).Str("claim_wait", logDuration(w.cfg.ClaimWait)).Msg("worker started; claiming tasks")
	var slots sync.WaitGroup
	for i := range w.cfg.Slots {
		slots.Add(1)
		go func() {
			defer slots.Done()
			w.slotLoop(runCtx, killCtx, reportCtx, i)
		}()
	}
	slots.Wait()
	close(slotsDone)
	stopHeartbeats()
	bg.Wait()

	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	// Tasks claimed for slots that stopped before taking them go back.
	w.claimMu.Lock()
	w.ready = nil
	w.claimMu.Unlock()
	// A claim cut off by the shutdown may have been granted unseen.
	if err := w.sweep(final, reasonLostClaim); err != nil {
		w.log.Error().Err(err).Msg("could not check for tasks left held; the next start releases them")
	}
	w.sendHeartbeat(final, "offline")
	w.state.CleanExit = true
	w.state.save(w.log)

	if cause := context.Cause(runCtx); errors.As(cause, new(errFatal)) {
		return cause
	}
	w.log.Info().Msg("stopped")
	return nil
}

// startup logs in, says it is alive, and releases what a crashed earlier
// run left held.
func (w *Worker) startup(ctx context.Context) error {
	var b backoff
	for {
		err := w.api.login(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stopped before logging in: %w", err)
		}
		if !transient(ctx, err) || client.IsStatus(err, http.StatusUnauthorized) {
			return errFatal{fmt.Errorf("%w (check --email and the password)", err)}
		}
		d := b.next()
		w.log.Warn().Err(err).Str("retry_in", logDuration(d)).Msg("cannot reach the service to log in; will retry")
		if !sleepCtx(ctx, d) {
			return fmt.Errorf("stopped before logging in: %w", err)
		}
	}
	w.sendHeartbeat(ctx, "idle")
	if err := w.sweep(ctx, reasonRestarted); err != nil {
		if ctx.Err() != nil {
			return err
		}
		var f errFatal
		if errors.As(err, &f) {
			return err
		}
		w.log.Warn().Err(err).Msg("could not check for tasks left from a previous run; will check again before the next claim")
		w.needSweep, w.sweepReason = true, reasonRestarted
	}
	return nil
}

// shutdownTimers runs the shutdown clock: when runCtx ends, running
// commands get cfg.Grace to finish before kill; reports get KillGrace +
// reportGrace more before stopReports.
func (w *Worker) shutdownTimers(runCtx, killCtx context.Context, slotsDone <-chan struct{}, kill, stopReports context.CancelFunc) {
	select {
	case <-runCtx.Done():
	case <-slotsDone:
		return
	}
	if w.busy() > 0 {
		w.log.Info().Int("running", w.busy()).Str("grace", logDuration(w.cfg.Grace)).
			Msg("shutting down: no new claims; running tasks may finish within the grace period (signal again to stop them now)")
	} else {
		w.log.Info().Msg("shutting down")
	}
	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	select {
	case <-grace.C:
		if w.busy() > 0 {
			w.log.Warn().Int("running", w.busy()).Msg("grace period over: stopping running commands and releasing their tasks")
		}
		kill()
	case <-slotsDone:
		return
	case <-killCtx.Done(): // Abort: a second signal
	}
	last := time.NewTimer(w.cfg.KillGrace + reportGrace)
	defer last.Stop()
	select {
	case <-last.C:
		w.log.Error().Msg("gave up reporting: the service is unreachable; unreported tasks are released at the next start")
		stopReports()
	case <-slotsDone:
	}
}

func (w *Worker) slotLoop(runCtx, killCtx, reportCtx context.Context, slot int) {
	for {
		t := w.claimNext(runCtx, slot)
		if t == nil {
			return
		}
		w.runTask(killCtx, reportCtx, slot, t)
	}
}

// claimNext claims the next task for slot; nil when ctx ends first. One
// claim asks for as many tasks as there are free slots; what comes beyond
// this slot's task waits in ready for the next slots that ask.
func (w *Worker) claimNext(ctx context.Context, slot int) *claimedTask {
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	var b backoff
	for ctx.Err() == nil {
		if len(w.ready) > 0 {
			t := w.ready[0]
			w.ready = w.ready[1:]
			w.setSlot(slot, slotState{TaskID: t.ID, Title: t.Title, Type: t.typeName(), Since: t.claimedAt})
			return t
		}
		if w.serviceHoldsMore() {
			w.needSweep = true
			if w.sweepReason == "" {
				w.sweepReason = reasonNotHeld
			}
		}
		if w.needSweep {
			reason := w.sweepReason
			if reason == "" {
				reason = reasonLostClaim
			}
			if err := w.sweepLocked(ctx, reason); err != nil {
				if ctx.Err() == nil {
					d := b.next()
					w.log.Warn().Err(err).Str("retry_in", logDuration(d)).Msg("could not check held tasks after a failed claim; will retry")
					sleepCtx(ctx, d)
				}
				continue
			}
			w.needSweep, w.sweepReason = false, ""
		}
		start := time.Now()
		raws, err := w.claim(ctx)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				// Cut off by shutdown: the service may have granted it.
				w.needSweep = true
				return nil
			case !w.claimOne && (client.IsStatus(err, http.StatusNotFound) || client.IsStatus(err, http.StatusMethodNotAllowed)):
				w.log.Warn().Err(err).Msg("the service has no batched claim (POST /worker/tasks/claims); claiming one task at a time")
				w.claimOne = true
			case w.claimWait > 0 && isFieldError(err, "wait"):
				w.log.Warn().Err(err).Msg("the service refuses this long-poll wait; claiming without long-poll from now on")
				w.claimWait = 0
			case client.IsStatus(err, http.StatusForbidden):
				w.cancelRun(errFatal{fmt.Errorf("claim refused (403): is %s a worker account? %w", w.cfg.Email, err)})
				return nil
			case transient(ctx, err):
				w.needSweep = true
				d := b.next()
				w.log.Warn().Err(err).Str("retry_in", logDuration(d)).Msg("claim failed; backing off")
				sleepCtx(ctx, d)
			default:
				// The service rejected the request itself: retrying at
				// once would only repeat it. Wait long, then try again.
				w.log.Error().Err(err).Str("retry_in", logDuration(maxBackoff)).Msg("claim rejected by the service")
				sleepCtx(ctx, maxBackoff)
			}
			continue
		}
		claimedAt := time.Now()
		var tasks []*claimedTask
		for _, raw := range raws {
			t, derr := decodeClaim(raw)
			if derr != nil {
				err = derr
				continue
			}
			if t != nil {
				t.claimedAt, t.claimTook = claimedAt, claimedAt.Sub(start)
				tasks = append(tasks, t)
			}
		}
		if err != nil {
			// Something was claimed that we cannot read: the sweep
			// releases it (the tasks read are run).
			d := b.next()
			w.log.Error().Err(err).Str("retry_in", logDuration(d)).Msg("could not read a claimed task; releasing it")
			w.needSweep, w.sweepReason = true, reasonLostClaim
			if len(tasks) == 0 {
				sleepCtx(ctx, d)
				continue
			}
		} else {
			b.reset()
		}
		if len(tasks) == 0 {
			elapsed := time.Since(start)
			switch {
			case w.claimWait > 0 && elapsed >= w.claimWait/2:
				w.longPolled = true // it waited: claim again at once
			case w.longPolled:
				// A long-polling server answered at once: it is draining
				// for a restart. Try again soon, once; if it answers at
				// once again, it is treated as not long-polling.
				w.longPolled = false
				sleepCtx(ctx, jitter(w.cfg.PollJitter))
			default:
				// This server does not long-poll. Poll, with jitter so a
				// fleet spreads out.
				sleepCtx(ctx, w.cfg.PollInterval-elapsed+jitter(w.cfg.PollJitter))
			}
			continue
		}
		t := tasks[0]
		w.ready = append(w.ready, tasks[1:]...)
		w.setSlot(slot, slotState{TaskID: t.ID, Title: t.Title, Type: t.typeName(), Since: claimedAt})
		return t
	}
	return nil
}

// claim asks the service for as many tasks as there are free slots (one
// request), long-polling when claimWait is set; under claimMu. Each element
// is one claimed task's JSON.
func (w *Worker) claim(ctx context.Context) ([]json.RawMessage, error) {
	var raws []json.RawMessage
	err := w.api.call(ctx, w.claimWait+callTimeout, func(ctx context.Context) error {
		raws = nil
		if w.claimOne {
			var raw json.RawMessage
			path := "/api/v1/worker/tasks/claim"
			if w.claimWait > 0 {
				path += fmt.Sprintf("?wait=%d", int(w.claimWait.Seconds()))
			}
			if err := w.api.c.Do(ctx, http.MethodPost, path, nil, &raw); err != nil {
				return err
			}
			raws = []json.RawMessage{raw}
			return nil
		}
		body := map[string]int{"max": min(maxClaimMany, max(1, len(w.slots)-w.busy()-len(w.ready)))}
		if w.claimWait > 0 {
			body["wait"] = int(w.claimWait.Seconds())
		}
		return w.api.c.Do(ctx, http.MethodPost, "/api/v1/worker/tasks/claims", body, &raws)
	})
	return raws, err
}

// maxClaimMany is the most tasks the service hands out in one claim.
const maxClaimMany = 100

// sweep releases tasks this worker holds in progress that no slot is
// running: left by a crashed run, or claimed by a request whose answer was
// lost.
func (w *Worker) sweep(ctx context.Context, reason string) error {
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	return w.sweepLocked(ctx, reason)
}

func (w *Worker) sweepLocked(ctx context.Context, reason string) error {
	var held []events.Task
	err := w.api.call(ctx, callTimeout, func(ctx context.Context) error {
		var err error
		held, err = w.api.c.MyTasks(ctx, false)
		return err
	})
	if err != nil {
		if client.IsStatus(err, http.StatusForbidden) {
			return errFatal{fmt.Errorf("listing held tasks refused (403): is %s a worker account? %w", w.cfg.Email, err)}
		}
		return fmt.Errorf("list held tasks: %w", err)
	}
	for _, t := range held {
		if t.Status != events.StatusInProgress || w.running(t.ID) || w.isReady(t.ID) {
			continue
		}
		_, err := retryRelease(ctx, w.api, t.ID, reason)
		switch {
		case err == nil:
			w.log.Warn().Str("task_id", t.ID).Str("reason", reason).Msg("released a task this worker held but was not running")
		case gone(err):
		default:
			return fmt.Errorf("release %s: %w", t.ID, err)
		}
	}
	return nil
}

func isFieldError(err error, field string) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == http.StatusBadRequest && e.Field == field
}

func retryRelease(ctx context.Context, a *apiClient, id, reason string) (*events.Task, error) {
	var out *events.Task
	err := a.retry(ctx, "release", func(ctx context.Context) error {
		var err error
		out, err = a.c.Release(ctx, id, reason)
		return err
	})
	return out, err
}

func (w *Worker) setSlot(slot int, s slotState) {
	w.mu.Lock()
	w.slots[slot] = s
	w.mu.Unlock()
	select {
	case w.hbWake <- struct{}{}:
	default:
	}
}

// isReady reports whether a claimed task waits in ready; under claimMu.
func (w *Worker) isReady(taskID string) bool {
	for _, t := range w.ready {
		if t.ID == taskID {
			return true
		}
	}
	return false
}

func (w *Worker) running(taskID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.slots {
		if s.TaskID == taskID {
			return true
		}
	}
	return false
}

func (w *Worker) busy() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.slots {
		if s.TaskID != "" {
			n++
		}
	}
	return n
}

// heartbeats reports liveness every 30 s idle, 15 s working, and soon after
// a slot changes (at most once a second).
func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTimer(heartbeatIdle) // startup sent the first one
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.hbWake:
			if !sleepCtx(ctx, time.Second) {
				return
			}
		}
		w.sendHeartbeat(ctx, "")
		interval := heartbeatIdle
		if w.busy() > 0 {
			interval = heartbeatBusy
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(interval)
	}
}

// sendHeartbeat sends one heartbeat; status "" means idle or working from
// the slots.
func (w *Worker) sendHeartbeat(ctx context.Context, status string) {
	periodic := status == ""
	w.mu.Lock()
	var current string
	slots := make([]map[string]any, len(w.slots))
	for i, s := range w.slots {
		st := map[string]any{"slot": i + 1, "status": "idle"}
		if s.TaskID != "" {
			st["status"], st["task_id"], st["task_title"], st["task_type"] = "working", s.TaskID, capText(s.Title, 200), s.Type
			st["task_started_at"] = s.Since.UTC().Format(time.RFC3339)
			if current == "" {
				current = s.TaskID
			}
		}
		slots[i] = st
	}
	w.mu.Unlock()
	if status == "" {
		status = "idle"
		if current != "" {
			status = "working"
		}
	}
	meta := map[string]any{
		"pid": w.pid, "version": w.version, "restart_count": w.state.Runs - 1, "slots": len(slots),
		"slot_status": slots, "host": w.host, "started_at": w.started.UTC().Format(time.RFC3339),
	}
	if status == "offline" {
		current, meta["offline_reason"] = "", "graceful-shutdown"
		meta["slot_status"] = []any{}
	}
	// The service takes at most 16 KB of metadata: with many slots, drop
	// titles first, then the per-slot list.
	if b, _ := json.Marshal(meta); len(b) > maxHeartbeatMeta {
		for _, st := range slots {
			delete(st, "task_title")
		}
		if b, _ := json.Marshal(meta); len(b) > maxHeartbeatMeta {
			delete(meta, "slot_status")
			meta["working"] = w.busy()
		}
	}
	hb := client.Heartbeat{Status: status, CurrentTaskID: current, Metadata: meta}
	var answer struct {
		InProgress *int64 `json:"in_progress"` // absent from older services
	}
	err := w.api.call(ctx, callTimeout, func(ctx context.Context) error {
		return w.api.c.Do(ctx, http.MethodPost, "/api/v1/worker/heartbeat", hb, &answer)
	})
	if err != nil && ctx.Err() == nil {
		w.log.Warn().Err(err).Str("status", status).Msg("heartbeat failed")
		return
	}
	w.log.Debug().Str("status", status).Str("current_task_id", current).Msg("heartbeat")
	// Only the periodic heartbeats act on it: the first one is followed by
	// the start's own sweep, and the last by the shutdown's.
	if err == nil && answer.InProgress != nil && periodic {
		w.serviceHeld.Store(*answer.InProgress)
		w.sweepIfServiceHoldsMore(ctx)
	}
}

// sweepIfServiceHoldsMore releases the tasks the service has in progress
// under this worker that it does not run: a completion it was told of may
// have been lost (a failover to a standby that lagged), and the task would
// otherwise stay in progress as long as this worker heartbeats. It sweeps
// at once when no claim is in flight (every slot busy), else the claiming
// slot does before its next claim: a sweep never races a claim.
func (w *Worker) sweepIfServiceHoldsMore(ctx context.Context) {
	if !w.claimMu.TryLock() {
		return
	}
	defer w.claimMu.Unlock()
	if !w.serviceHoldsMore() {
		return
	}
	if err := w.sweepLocked(ctx, reasonNotHeld); err != nil && ctx.Err() == nil {
		w.log.Warn().Err(err).Msg("could not give back tasks the service holds under this worker; will try again before the next claim")
		w.needSweep, w.sweepReason = true, reasonNotHeld
	}
}

// serviceHoldsMore says the last heartbeat's answer counted more tasks in
// progress under this worker than it runs or has ready (under claimMu), and
// forgets that count.
func (w *Worker) serviceHoldsMore() bool {
	held := w.serviceHeld.Swap(-1)
	return held > int64(w.busy()+len(w.ready))
}
