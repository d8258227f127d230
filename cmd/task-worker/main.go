// Command task-worker is the reference ClawdBot worker: it claims tasks
// from a task-service, runs a command per task (Claude Code headless, a
// shell script, any program), streams the command's output as task
// updates and reports the outcome. Run `task-worker --help` for the
// whole story.
//
// Files by job: config.go (flags, env, config file), loop.go (slots,
// claims, heartbeats, shutdown, crash recovery), task.go (one task: files,
// env, outcome, report), run.go (the process group), updates.go (output
// batching), prompt.go (the prompt), api.go (error policy, backoff),
// state.go (restart counter).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/clawdbot/task-service/cmd/internal/logs"
	"github.com/clawdbot/task-service/cmd/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "completion" {
		return runCompletion(args[1:], os.Stdout, os.Stderr)
	}
	cfg, err := loadConfig(args, os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "task-worker: %v\n(run task-worker --help for every setting)\n", err)
		return 2
	}
	log := logs.New(cfg.LogLevel, cfg.LogFormat)
	w := NewWorker(cfg, log, buildVersion())

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		log.Info().Str("signal", s.String()).Msg("signal received")
		stop()
		s = <-sigs
		log.Warn().Str("signal", s.String()).Msg("second signal: stopping running commands now")
		w.Abort()
	}()

	log.Info().Str("version", buildVersion()).Str("api", cfg.API).Str("email", cfg.Email).Int("slots", cfg.Slots).
		Int("pid", os.Getpid()).Msg("task-worker starting")
	if err := w.Run(ctx); err != nil {
		log.Error().Err(err).Msg("task-worker stopped with an error")
		return 1
	}
	return 0
}

// buildVersion is the version the worker reports in its logs and heartbeats.
func buildVersion() string { return version.Read().Short() }

// logDuration is a duration as logs show it, with its unit: 29.047s, 350ms
// (zerolog's Dur writes a bare number of milliseconds).
func logDuration(d time.Duration) string { return d.Round(time.Millisecond).String() }
