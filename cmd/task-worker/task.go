package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// envKey tags every command's environment with the worker's key, so the
// next start can find what a crashed run left running.
const envKey = "TASK_WORKER_KEY"

// maxResultFile bounds the result file read into memory; the service's
// body limit decides what it accepts.
const maxResultFile = 16 << 20

// taskFiles are the files a command gets.
type taskFiles struct {
	Dir, Prompt, Params, Result string
	// Output is $TASK_OUTPUT_DIR: every file the command leaves there is
	// uploaded as task data before the outcome is reported.
	Output string
	// Checkpoint is $TASK_CHECKPOINT: the checkpoint the claim carried
	// (checkpointInitial, empty when none), which the command may rewrite;
	// its changes are uploaded as the task's checkpoint.
	Checkpoint        string
	checkpointInitial []byte
	// Inputs is $TASK_INPUTS: the results and files of the task's
	// dependencies, as the claim carried them ([] when none).
	Inputs string
}

// outcome is what the worker tells the service about a task.
type outcome struct {
	action string // "complete", "fail" or "release"
	kind   string // failure kind: events.FailureError or events.FailureTimeout
	reason string
	result json.RawMessage
	// usage is the LLM usage the command's output reported (Claude Code's
	// JSON result), sent with the completion or the failure.
	usage *events.UsageReport
}

// runTask runs one claimed task to its end and reports it. The slot is
// free again when it returns.
func (w *Worker) runTask(killCtx, reportCtx context.Context, slot int, t *claimedTask) {
	log := w.log.With().Str("task_id", t.ID).Str("type", t.typeName()).Int("slot", slot+1).Logger()
	defer w.setSlot(slot, slotState{})
	serverTimeout := 0
	if t.TaskType != nil {
		serverTimeout = t.TaskType.TimeoutSeconds
	}
	spec := w.cfg.Resolve(t.typeName(), serverTimeout)
	log.Info().Str("title", t.Title).Str("timeout", logDuration(spec.Timeout)).Str("timeout_from", spec.TimeoutFrom).Msg("claimed a task")

	if spec.Command == "" {
		w.report(reportCtx, log, t, outcome{action: "fail", kind: events.FailureError,
			reason: fmt.Sprintf("worker %s has no command for task type %q: set --command or types.%q.command in its config",
				w.cfg.Email, t.typeName(), t.typeName())})
		return
	}
	files, err := w.writeFiles(t)
	if err != nil {
		w.report(reportCtx, log, t, outcome{action: "fail", kind: events.FailureError,
			reason: "worker could not prepare the task's files: " + err.Error()})
		return
	}
	if !w.cfg.KeepFiles {
		defer os.RemoveAll(files.Dir)
	}
	workdir := spec.Workdir
	if workdir == "" {
		workdir = files.Dir
	}

	upd := newUpdater(w.limits, log, func(ctx context.Context, msg string) error {
		// One key for every attempt: a retry after a lost answer does not
		// post the message twice.
		ctx = client.WithIdempotencyKey(ctx, uuid.NewString())
		return w.api.retry(ctx, "post update", func(ctx context.Context) error { return w.api.c.PostUpdate(ctx, t.ID, msg) })
	})
	upd.Start(reportCtx)
	checkpoints := w.startCheckpoints(reportCtx, log, t, files)
	res := runProcess(killCtx, procSpec{
		Command: spec.Command, Dir: workdir, Env: w.commandEnv(t, spec, files), StdinFile: files.Prompt,
		Timeout: spec.Timeout, KillGrace: w.cfg.KillGrace, OnLine: upd.Add, Log: log,
	})
	upd.Close()
	// Before the report: once the task ends or is released it is no longer
	// this worker's to checkpoint.
	checkpoints.Close(reportCtx)
	o := outcomeOf(res, files, spec)
	if o.action == "complete" || o.action == "fail" {
		o.usage = usageFromOutput(res.LastJSON)
		// Before the report: a completed task's data is all there when it
		// completes, and a failed attempt's data is there for its retry.
		if _, _, err := w.uploadOutput(reportCtx, log, t.ID, files.Output); err != nil && o.action == "complete" {
			o = outcome{action: "fail", kind: events.FailureError, reason: "the command succeeded but its output could not be uploaded: " + err.Error(), usage: o.usage}
		} else if err != nil {
			o.reason += "\n(and its output could not be uploaded: " + err.Error() + ")"
		}
	}
	reported := w.report(reportCtx, log, t, o)
	done := time.Now()

	lines, posts, omitted := upd.stats()
	ev := log.Info()
	if o.action != "complete" {
		ev = log.Warn().Str("reason", capText(o.reason, 300))
	}
	if res.StartErr == nil {
		// The loop's own cost per task: claim answer → command started,
		// command exited → outcome acknowledged by the service.
		ev = ev.Float64("claim_ms", ms(t.claimTook)).Float64("start_overhead_ms", ms(res.Started.Sub(t.claimedAt))).
			Float64("report_overhead_ms", ms(done.Sub(res.Exited))).
			Str("ran", logDuration(res.Exited.Sub(res.Started))).Int("exit_code", res.ExitCode)
	}
	ev.Str("outcome", o.action).Bool("reported", reported).Int("lines", lines).Int("updates", posts).
		Int("lines_omitted", omitted).Msg("task finished")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeFiles creates the task's directory with prompt.md and params.json.
func (w *Worker) writeFiles(t *claimedTask) (taskFiles, error) {
	if _, err := uuid.Parse(t.ID); err != nil {
		return taskFiles{}, fmt.Errorf("task id %q is not a UUID", t.ID)
	}
	dir := filepath.Join(w.cfg.WorkDir, "tasks", t.ID)
	if err := os.RemoveAll(dir); err != nil { // a leftover from a crashed run
		return taskFiles{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return taskFiles{}, err
	}
	f := taskFiles{Dir: dir, Prompt: filepath.Join(dir, "prompt.md"), Params: filepath.Join(dir, "params.json"),
		Result: filepath.Join(dir, "result.json"), Output: filepath.Join(dir, "output"),
		Checkpoint: filepath.Join(dir, "checkpoint.json"), Inputs: filepath.Join(dir, "inputs.json"),
		checkpointInitial: t.checkpointJSON()}
	if err := os.MkdirAll(f.Output, 0o700); err != nil {
		return taskFiles{}, err
	}
	if err := os.WriteFile(f.Prompt, []byte(buildPrompt(t)), 0o600); err != nil {
		return taskFiles{}, err
	}
	if err := os.WriteFile(f.Params, t.paramsJSON(), 0o600); err != nil {
		return taskFiles{}, err
	}
	if err := os.WriteFile(f.Checkpoint, f.checkpointInitial, 0o600); err != nil {
		return taskFiles{}, err
	}
	if err := os.WriteFile(f.Inputs, t.inputsJSON(), 0o600); err != nil {
		return taskFiles{}, err
	}
	return f, nil
}

// commandEnv is the worker's environment without its password, the
// config's env, then the TASK_* variables (last, so nothing overrides them).
func (w *Worker) commandEnv(t *claimedTask, spec Spec, f taskFiles) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TASK_WORKER_PASSWORD=") {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	return append(env,
		envKey+"="+w.key,
		"TASK_ID="+t.ID,
		"TASK_TYPE="+t.typeName(),
		"TASK_TITLE="+t.Title,
		"TASK_ATTEMPT="+strconv.Itoa(t.RetryCount+1),
		"TASK_DIR="+f.Dir,
		"TASK_PROMPT_FILE="+f.Prompt,
		"TASK_PARAMS_FILE="+f.Params,
		"TASK_RESULT_FILE="+f.Result,
		"TASK_OUTPUT_DIR="+f.Output,
		"TASK_CHECKPOINT="+f.Checkpoint,
		"TASK_INPUTS="+f.Inputs,
		"TASK_API="+w.cfg.API,
		"TASK_TOKEN="+w.api.c.Token(),
	)
}

// outcomeOf decides what to report from how the command ended.
func outcomeOf(res procResult, f taskFiles, spec Spec) outcome {
	switch {
	case res.StartErr != nil:
		return outcome{action: "fail", kind: events.FailureError, reason: "could not start the command: " + res.StartErr.Error()}
	case res.Stopped == stopShutdown:
		return outcome{action: "release", reason: reasonShutdown}
	case res.Stopped == stopTimeout:
		reason := fmt.Sprintf("timed out after %s (timeout from the %s); the command's process group was killed", spec.Timeout, spec.TimeoutFrom)
		if res.StderrTail != "" {
			reason += "\nstderr (last lines):\n" + res.StderrTail
		}
		return outcome{action: "fail", kind: events.FailureTimeout, reason: reason}
	case res.ExitCode == 0:
		result, err := readResult(f.Result)
		if err != nil {
			return outcome{action: "fail", kind: events.FailureError, reason: "the command succeeded but its result file could not be read: " + err.Error()}
		}
		if result == nil {
			result = res.LastJSON
		}
		return outcome{action: "complete", result: result}
	}
	how := fmt.Sprintf("exit status %d", res.ExitCode)
	if res.Signal != "" {
		how = "killed by signal: " + res.Signal
	}
	if res.StderrTail == "" {
		return outcome{action: "fail", kind: events.FailureError, reason: "command failed with " + how + " and printed nothing on stderr"}
	}
	return outcome{action: "fail", kind: events.FailureError, reason: how + ": " + res.StderrTail}
}

// readResult reads the result file: nil when absent, empty or null; JSON
// as is; any other text as a JSON string.
func readResult(path string) (json.RawMessage, error) {
	fh, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b := make([]byte, maxResultFile+1)
	n, _ := readFull(fh, b)
	if n > maxResultFile {
		return nil, fmt.Errorf("larger than %d bytes", maxResultFile)
	}
	b = bytes.TrimSpace(b[:n])
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	if json.Valid(b) {
		return b, nil
	}
	return json.Marshal(sanitizeLine(string(b)))
}

func readFull(f *os.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// report tells the service the outcome, retrying what may succeed later
// until ctx ends. A task the service says is no longer ours (cancelled,
// reassigned, ended: 403/404/409) is logged and left. It reports whether
// the service acknowledged the outcome.
func (w *Worker) report(ctx context.Context, log zerolog.Logger, t *claimedTask, o outcome) bool {
	if o.action == "complete" || o.action == "fail" {
		// Together with the other slots' outcomes that are ready, in one
		// request; alone (below) when that cannot settle it.
		item := client.Finish{ID: t.ID, Status: events.StatusCompleted, Result: o.result, Usage: o.usage}
		if o.action == "fail" {
			item = client.Finish{ID: t.ID, Status: events.StatusFailed, Kind: o.kind,
				Reason: capText(sanitizeLine(o.reason), events.MaxReasonLen/2), Usage: o.usage}
		}
		if alone, err := w.finish(ctx, item); !alone {
			if err != nil {
				if !w.reportFailed(ctx, log, err) {
					log.Error().Err(err).Str("outcome", o.action).Msg("the service rejected the outcome")
				}
				return false
			}
			return true
		}
	}
	if o.usage != nil && (o.action == "complete" || o.action == "fail") {
		// Alone: the usage first, on its own route; a refusal loses the
		// figures, never the outcome.
		err := w.api.retry(ctx, "report usage", func(ctx context.Context) error {
			_, err := w.api.c.ReportUsage(ctx, t.ID, *o.usage)
			return err
		})
		if err != nil {
			if w.reportFailed(ctx, log, err) {
				return false
			}
			log.Warn().Err(err).Msg("the service refused the LLM usage; reporting the outcome without it")
		}
	}
	if o.action == "complete" && o.result != nil {
		err := w.api.retry(ctx, "post result", func(ctx context.Context) error { return w.api.c.PostResult(ctx, t.ID, o.result) })
		switch {
		case err == nil:
		case w.reportFailed(ctx, log, err):
			return false
		default:
			// 400/413: the result itself was refused; the task did not
			// produce an acceptable result, so it fails, saying why.
			o = outcome{action: "fail", kind: events.FailureError, reason: "the service rejected the command's result: " + err.Error()}
		}
	}
	var err error
	switch o.action {
	case "complete":
		err = w.api.retry(ctx, "complete", func(ctx context.Context) error {
			_, err := w.api.c.Complete(ctx, t.ID)
			return err
		})
	case "fail":
		// Command output may hold NUL or broken UTF-8, which the service
		// refuses; a refused failure would leave the task held forever.
		reason := capText(sanitizeLine(o.reason), events.MaxReasonLen/2)
		fail := func(reason string) error {
			return w.api.retry(ctx, "fail", func(ctx context.Context) error {
				_, err := w.api.c.FailKind(ctx, t.ID, o.kind, reason)
				return err
			})
		}
		err = fail(reason)
		if err != nil && !gone(err) && ctx.Err() == nil {
			log.Error().Err(err).Msg("the service refused the failure reason; failing the task with a plain one")
			err = fail("the command failed; the service refused its failure reason: " + sanitizeLine(err.Error()))
		}
	case "release":
		_, err = retryRelease(ctx, w.api, t.ID, sanitizeLine(o.reason))
	}
	if err != nil {
		if !w.reportFailed(ctx, log, err) {
			log.Error().Err(err).Str("outcome", o.action).Msg("the service rejected the outcome")
		}
		return false
	}
	return true
}

// reportFailed logs a report error that ends the report: the task is gone
// or the worker ran out of time. False for a rejection the caller handles.
func (w *Worker) reportFailed(ctx context.Context, log zerolog.Logger, err error) bool {
	switch {
	case gone(err):
		log.Warn().Err(err).Msg("the task is no longer this worker's (cancelled, reassigned or already ended); moving on")
		return true
	case ctx.Err() != nil:
		log.Error().Err(err).Msg("could not report the task before shutting down; it stays in progress and the next start releases it")
		return true
	}
	return false
}
