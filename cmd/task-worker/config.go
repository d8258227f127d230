package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/clawdbot/task-service/cmd/internal/version"
)

// Limits that are not worth a flag.
const (
	defaultTimeout = 30 * time.Minute
	maxTimeout     = 2 * time.Hour
	maxBackoff     = 5 * time.Minute
	heartbeatIdle  = 30 * time.Second
	heartbeatBusy  = 15 * time.Second
	maxSlots       = 64
)

// Config is the worker's whole configuration after flags, environment and
// the config file are merged (flag > env > file > default).
type Config struct {
	API          string
	Email        string
	Password     string
	Slots        int
	Command      string // default command for types without their own
	ConfigFile   string
	Grace        time.Duration // shutdown: how long running tasks may go on
	KillGrace    time.Duration // SIGTERM → SIGKILL delay for a process group
	Timeout      time.Duration // default task timeout when neither the type nor the file says
	ClaimWait    time.Duration // long-poll wait asked of the server
	PollInterval time.Duration // empty-claim poll interval when the server does not long-poll
	PollJitter   time.Duration
	// CheckpointEvery is how often a changed $TASK_CHECKPOINT is uploaded.
	CheckpointEvery time.Duration
	WorkDir         string // per-task files and the state file
	KeepFiles       bool
	LogLevel        string
	LogFormat       string

	// Defaults and Types come from the config file: settings for every
	// task, and per task type name.
	Defaults TypeSettings
	Types    map[string]TypeSettings
}

// TypeSettings is how tasks of one type run.
type TypeSettings struct {
	Command        string            `json:"command,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Workdir        string            `json:"workdir,omitempty"`
}

// fileConfig is the config file (JSON). Top-level command, timeout_seconds,
// env and workdir are the defaults every type inherits.
type fileConfig struct {
	API          string `json:"api,omitempty"`
	Email        string `json:"email,omitempty"`
	Password     string `json:"password,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
	Slots        int    `json:"slots,omitempty"`
	GraceSeconds int    `json:"grace_seconds,omitempty"`
	WorkDir      string `json:"work_dir,omitempty"`
	TypeSettings
	Types map[string]TypeSettings `json:"types,omitempty"`
}

// Spec is what one task runs with, resolved from the config and its type.
type Spec struct {
	Command string
	Timeout time.Duration
	Env     map[string]string
	Workdir string
	// TimeoutFrom says which setting chose the timeout, for logs and reasons.
	TimeoutFrom string
}

// Resolve picks the settings for a task of type typeName whose server-side
// definition says serverTimeout seconds (0: not set). The effective timeout
// is the shorter of the server's and the file's type timeout (the server's
// stuck detector enforces its own anyway, so a longer local one is
// pointless, and a shorter one is the operator's deliberate choice); else
// the file's default, else --timeout; capped at 2 h.
func (c *Config) Resolve(typeName string, serverTimeout int) Spec {
	t := c.Types[typeName]
	s := Spec{Command: firstNonEmpty(t.Command, c.Command),
		Workdir: firstNonEmpty(t.Workdir, c.Defaults.Workdir), Env: map[string]string{}}
	for k, v := range c.Defaults.Env {
		s.Env[k] = v
	}
	for k, v := range t.Env {
		s.Env[k] = v
	}
	switch {
	case serverTimeout > 0 && (t.TimeoutSeconds <= 0 || serverTimeout <= t.TimeoutSeconds):
		s.Timeout, s.TimeoutFrom = time.Duration(serverTimeout)*time.Second, "task type"
	case t.TimeoutSeconds > 0:
		s.Timeout, s.TimeoutFrom = time.Duration(t.TimeoutSeconds)*time.Second, "worker config for the type"
	case c.Defaults.TimeoutSeconds > 0:
		s.Timeout, s.TimeoutFrom = time.Duration(c.Defaults.TimeoutSeconds)*time.Second, "worker config default"
	default:
		s.Timeout, s.TimeoutFrom = c.Timeout, "worker default"
	}
	if s.Timeout > maxTimeout {
		s.Timeout, s.TimeoutFrom = maxTimeout, s.TimeoutFrom+", capped at 2h"
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// option is one setting: its flag, env twin, help and default.
type option struct {
	flag, env, def, help string
	value                string
	isBool               bool
}

func (o *option) String() string     { return o.value }
func (o *option) Set(v string) error { o.value = v; return nil }
func (o *option) IsBoolFlag() bool   { return o.isBool }

// options lists every setting in the order --help shows them.
func options() []*option {
	return []*option{
		{flag: "api", env: "TASK_WORKER_API", help: "task-service base URL, e.g. http://tasks.internal:8001"},
		{flag: "email", env: "TASK_WORKER_EMAIL", help: "the worker account's email"},
		{flag: "password", env: "TASK_WORKER_PASSWORD", help: "the worker account's password (prefer the env var or --password-file; the worker logs in again on 401)"},
		{flag: "password-file", env: "TASK_WORKER_PASSWORD_FILE", help: "read the password from this file (first line), e.g. a systemd credential"},
		{flag: "slots", env: "TASK_WORKER_SLOTS", def: "1", help: "tasks run at the same time; each slot holds one task (the account's max_concurrent_tasks must be at least this)"},
		{flag: "command", env: "TASK_WORKER_COMMAND", help: "default command, run with sh -c, for task types the config file does not map"},
		{flag: "config", env: "TASK_WORKER_CONFIG", help: "JSON config file: the same settings plus per-task-type commands (see below)"},
		{flag: "grace", env: "TASK_WORKER_GRACE", def: "5m", help: "on SIGTERM/SIGINT, how long running tasks may finish before they are killed and released"},
		{flag: "kill-grace", env: "TASK_WORKER_KILL_GRACE", def: "5s", help: "SIGTERM to SIGKILL delay when a command's process group is stopped"},
		{flag: "timeout", env: "TASK_WORKER_TIMEOUT", def: "30m", help: "task timeout when neither the task type nor the config file sets one (capped at 2h)"},
		{flag: "claim-wait", env: "TASK_WORKER_CLAIM_WAIT", def: "30s", help: "long-poll: how long the server may hold a claim open waiting for work (0: no long-poll)"},
		{flag: "poll-interval", env: "TASK_WORKER_POLL_INTERVAL", def: "30s", help: "when the server answers an empty claim at once (no long-poll), claim again after this"},
		{flag: "poll-jitter", env: "TASK_WORKER_POLL_JITTER", def: "5s", help: "random 0..jitter added to each poll interval so a fleet does not poll in step"},
		{flag: "checkpoint-every", env: "TASK_WORKER_CHECKPOINT_EVERY", def: "60s", help: "how often the file in $TASK_CHECKPOINT is uploaded as the task's checkpoint when it changed (and once more when the command exits)"},
		{flag: "work-dir", env: "TASK_WORKER_WORK_DIR", def: filepath.Join(os.TempDir(), "task-worker"), help: "where per-task files (prompt, params, result) and the restart counter live"},
		{flag: "keep-files", env: "TASK_WORKER_KEEP_FILES", def: "false", isBool: true, help: "keep each task's files after it is reported (debugging)"},
		{flag: "log-level", env: "TASK_WORKER_LOG_LEVEL", def: "info", help: "debug, info, warn or error"},
		{flag: "log-format", env: "TASK_WORKER_LOG_FORMAT", def: "auto", help: "json, console or auto (console on a terminal)"},
	}
}

const usageHead = `task-worker: the reference ClawdBot worker. It claims tasks from a
task-service, runs a command for each one and reports the outcome.

Usage: task-worker [flags]
       task-worker version
       task-worker completion bash|zsh|fish   (a shell completion script for the flags)

Every flag has an environment twin; a flag beats its env var, which beats
the config file, which beats the default.

`

const usageTail = `
Per task the worker:
  - claims it (long-poll; plain polling with jitter if the server does not hold claims),
  - writes prompt.md (id, title, description, SOP, params, previous attempts) and
    params.json to a fresh directory, and runs the command with sh -c in its own
    process group, with the prompt on stdin and these variables set:
      TASK_ID, TASK_TYPE, TASK_TITLE, TASK_ATTEMPT, TASK_PARAMS_FILE, TASK_PROMPT_FILE,
      TASK_RESULT_FILE, TASK_OUTPUT_DIR, TASK_CHECKPOINT, TASK_INPUTS, TASK_DIR,
      TASK_API (base URL), TASK_TOKEN (bearer token for the API)
    (TASK_WORKER_PASSWORD is removed from the command's environment),
  - checkpoints: $TASK_CHECKPOINT is a file holding the checkpoint an earlier attempt
    saved (empty when none). Write a JSON state there (e.g. {"session_id": "..."},
    at most 64 KiB); it is uploaded every --checkpoint-every when it changed and once
    more when the command exits, and the task's next attempt (a retry, or the task
    claimed again after a release) finds it in its own $TASK_CHECKPOINT,
  - inputs: $TASK_INPUTS is a JSON file with the results and files of the tasks this
    one depends on (the claim's inputs: ref, task id, result, files; [] when none);
    the prompt names them,
  - posts the lines the command prints on stdout as task updates, batched (every 2 s
    or 50 lines, up to 8 KB per update, at most 4 updates a second; under a flood
    lines are merged, and past 256 KB of backlog the middle is replaced by
    "... N lines omitted ..."),
  - uploads every file the command left in $TASK_OUTPUT_DIR as task data (the
    subdirectory's name is the data type, else output) before it reports;
  - on exit 0 posts the result and completes the task. The result is the file
    $TASK_RESULT_FILE if the command wrote it (JSON, or else posted as a JSON string),
    else the last line of stdout that is a JSON object, else none;
  - on another exit status fails the task with the last 2 KB of stderr as the reason;
  - past the timeout (the task type's timeout_seconds, else the config file's, else
    --timeout; capped at 2h) sends SIGTERM to the process group, SIGKILL after
    --kill-grace, and fails the task with kind timeout. Start long-running programs
    with exec so they are the process that gets SIGTERM and its grace.

On SIGTERM or SIGINT the worker stops claiming, lets running tasks finish within
--grace, then kills them and releases their tasks (a second signal skips the
grace), sends a last heartbeat with status offline and exits 0. On start it
releases the tasks its account still holds in progress from a crashed run: give
every worker process its own account.

Config file (JSON; every key optional):
  {
    "api": "http://127.0.0.1:8001", "email": "bot-1@example.com", "password_file": "/etc/task-worker/password",
    "slots": 2, "grace_seconds": 300, "work_dir": "/var/lib/task-worker",
    "command": "./default.sh", "timeout_seconds": 1800, "env": {"LANG": "C.UTF-8"}, "workdir": "/srv/repo",
    "types": {
      "code_review": {"command": "exec claude -p --output-format json", "timeout_seconds": 3600,
                      "env": {"CLAUDE_MODEL": "sonnet"}, "workdir": "/srv/repo"}
    }
  }
A type's settings override the top-level ones; env maps are merged.

Examples:
  # one slot, every task through one script
  TASK_WORKER_PASSWORD=secret task-worker --api http://127.0.0.1:8001 \
      --email bot-1@example.com --command ./handle-task.sh

  # Claude Code headless, two tasks at a time, commands per type from a file
  task-worker --config /etc/task-worker/claude-code.json --slots 2

  # debug logs, keep the task files
  task-worker --config worker.json --log-level debug --keep-files
`

// loadConfig merges flags (args), the environment (getenv) and the config
// file. It returns flag.ErrHelp for -h/--help after printing usage to out.
func loadConfig(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	if len(args) == 1 && args[0] == "version" {
		args = []string{"--version"} // both spellings, as in task-service and taskctl
	}
	opts := options()
	fs := flag.NewFlagSet("task-worker", flag.ContinueOnError)
	fs.SetOutput(out)
	byFlag := map[string]*option{}
	for _, o := range opts {
		byFlag[o.flag] = o
		help := o.help + " (env " + o.env
		if o.def != "" {
			help += ", default " + o.def
		}
		fs.Var(o, o.flag, help+")")
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(out, usageHead)
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(out, "  --%s\n    \t%s\n", f.Name, f.Usage)
		})
		fmt.Fprint(out, usageTail)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *showVersion {
		fmt.Fprint(out, "task-worker "+version.Read().String())
		return nil, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (everything is a flag; see --help)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	// raw returns the flag value if given, else the env var, else fromFile.
	raw := func(name, fromFile string) string {
		o := byFlag[name]
		if set[name] {
			return o.value
		}
		if v := getenv(o.env); v != "" {
			return v
		}
		if fromFile != "" {
			return fromFile
		}
		return o.def
	}

	cfg := &Config{ConfigFile: raw("config", "")}
	var file fileConfig
	if cfg.ConfigFile != "" {
		f, err := readConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, err
		}
		file = *f
	}
	cfg.Defaults = file.TypeSettings
	cfg.Types = file.Types
	cfg.API = strings.TrimRight(raw("api", file.API), "/")
	cfg.Email = raw("email", file.Email)
	cfg.Command = cfg.Defaults.Command
	cfg.Defaults.Command = ""
	if set["command"] || getenv("TASK_WORKER_COMMAND") != "" {
		cfg.Command = raw("command", "")
	}
	cfg.WorkDir = raw("work-dir", file.WorkDir)
	cfg.LogLevel = raw("log-level", "")
	cfg.LogFormat = raw("log-format", "")

	cfg.Password = raw("password", file.Password)
	if pf := raw("password-file", file.PasswordFile); pf != "" && (cfg.Password == "" || set["password-file"]) {
		b, err := os.ReadFile(pf)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %w", err)
		}
		cfg.Password, _, _ = strings.Cut(string(b), "\n")
		cfg.Password = strings.TrimRight(cfg.Password, "\r")
	}

	var err error
	fileInt := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	if cfg.Slots, err = strconv.Atoi(raw("slots", fileInt(file.Slots))); err != nil || cfg.Slots < 1 || cfg.Slots > maxSlots {
		return nil, fmt.Errorf("--slots must be a whole number from 1 to %d, not %q", maxSlots, raw("slots", fileInt(file.Slots)))
	}
	graceFile := ""
	if file.GraceSeconds > 0 {
		graceFile = (time.Duration(file.GraceSeconds) * time.Second).String()
	}
	durations := []struct {
		name     string
		fromFile string
		dst      *time.Duration
		min      time.Duration
	}{
		{"grace", graceFile, &cfg.Grace, 0},
		{"kill-grace", "", &cfg.KillGrace, 0},
		{"timeout", "", &cfg.Timeout, time.Second},
		{"claim-wait", "", &cfg.ClaimWait, 0},
		{"poll-interval", "", &cfg.PollInterval, 10 * time.Millisecond},
		{"poll-jitter", "", &cfg.PollJitter, 0},
		{"checkpoint-every", "", &cfg.CheckpointEvery, 100 * time.Millisecond},
	}
	for _, d := range durations {
		v := raw(d.name, d.fromFile)
		if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst < d.min {
			return nil, fmt.Errorf("--%s must be a duration of at least %s such as 30s or 5m, not %q", d.name, d.min, v)
		}
	}
	if cfg.ClaimWait != 0 && (cfg.ClaimWait < time.Second || cfg.ClaimWait > 60*time.Second) {
		return nil, fmt.Errorf("--claim-wait must be 0 (no long-poll) or from 1s to 60s (the service's limit), not %s", cfg.ClaimWait)
	}
	if cfg.Timeout > maxTimeout {
		cfg.Timeout = maxTimeout
	}
	if cfg.KeepFiles, err = strconv.ParseBool(raw("keep-files", "")); err != nil {
		return nil, fmt.Errorf("--keep-files must be true or false, not %q", raw("keep-files", ""))
	}
	return cfg, cfg.validate()
}

func (c *Config) validate() error {
	var problems []string
	if c.API == "" {
		problems = append(problems, "--api (TASK_WORKER_API) is required")
	} else if u, err := url.Parse(c.API); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problems = append(problems, fmt.Sprintf("--api must be an http(s) URL such as http://127.0.0.1:8001, not %q", c.API))
	}
	if c.Email == "" {
		problems = append(problems, "--email (TASK_WORKER_EMAIL) is required")
	}
	if c.Password == "" {
		problems = append(problems, "a password is required: TASK_WORKER_PASSWORD, --password-file or --password")
	}
	if c.Command == "" && len(c.Types) == 0 {
		problems = append(problems, "nothing to run: give --command (TASK_WORKER_COMMAND) or task types in --config")
	}
	for name, t := range c.Types {
		if t.TimeoutSeconds < 0 {
			problems = append(problems, fmt.Sprintf("config: types.%s.timeout_seconds must not be negative", name))
		}
	}
	if c.Defaults.TimeoutSeconds < 0 {
		problems = append(problems, "config: timeout_seconds must not be negative")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// readConfigFile reads the JSON config strictly: an unknown key is an
// error, because a misspelt "timeout_seconds" would otherwise silently run
// tasks with the default.
func readConfigFile(path string) (*fileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f fileConfig
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("config file %s: more than one JSON value", path)
	}
	return &f, nil
}
