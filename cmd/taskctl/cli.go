package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/clawdbot/task-service/api/client"
)

// Exit codes: scripts can tell a refused login from a failed command.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed, or replay found differences
	exitUsage   = 2 // bad flags or arguments
	exitAuth    = 3 // not logged in, or the API refused the login
)

// defaultAPI is where task-service listens by default.
const defaultAPI = "http://127.0.0.1:8001"

// app is what every API command needs: where to write, the environment and
// the way to the API. One is made per run, so tests run commands in-process.
type app struct {
	// ctx is the parent of every command's context (tests cancel it).
	ctx            context.Context
	stdout, stderr io.Writer
	stdin          io.Reader
	getenv         func(string) string
	// httpClient is nil for the default (tests pass their own).
	httpClient *http.Client
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{ctx: context.Background(), stdout: stdout, stderr: stderr, stdin: os.Stdin, getenv: os.Getenv}
}

// entry adapts an app method to the command table's signature.
func entry(fn func(a *app, args []string) int) func([]string, io.Writer, io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int { return fn(newApp(stdout, stderr), args) }
}

// signalContext ends on Ctrl-C or SIGTERM, so a command stops cleanly.
func (a *app) signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(a.ctx, os.Interrupt, syscall.SIGTERM)
}

// usageError is a mistake in the command line; it exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errNotLoggedIn: no token for the API in the config (or TASKCTL_TOKEN).
type notLoggedInError struct {
	api    string
	reason string
}

func (e *notLoggedInError) Error() string {
	login := "taskctl login --email you@example.com"
	if e.api != defaultAPI {
		login += " --api " + e.api
	}
	return fmt.Sprintf("%s: run `%s`", e.reason, login)
}

// cmdSpec describes a command for its --help: usage line, what it does,
// an example.
type cmdSpec struct {
	name    string // "tasks create"
	args    string // "[flags] TASK"
	summary string
	example string
}

// flagSet makes a FlagSet that reports instead of printing; parse prints.
func flagSet(spec cmdSpec) *flag.FlagSet {
	fs := flag.NewFlagSet("taskctl "+spec.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

func (a *app) printUsage(w io.Writer, fs *flag.FlagSet, spec cmdSpec) {
	fmt.Fprintf(w, "Usage: taskctl %s %s\n\n%s\n", spec.name, spec.args, spec.summary)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if name != "" {
				line += " " + name
			}
			switch def := f.DefValue; {
			case def == "" || def == "false" || def == "0" || def == "0s" || strings.Contains(usage, "(default"):
			case name == "string":
				usage += fmt.Sprintf(" (default %q)", def)
			default:
				usage += " (default " + def + ")"
			}
			fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
		})
	}
	fmt.Fprintf(w, "\nExample:\n  %s\n", strings.ReplaceAll(spec.example, "\n", "\n  "))
}

// parse reads flags anywhere among the arguments (`tasks show ID --json`
// works) and returns the positional ones. ok is false when the command
// must stop with code: 0 after --help, 2 after a mistake.
func (a *app) parse(fs *flag.FlagSet, spec cmdSpec, args []string) (pos []string, code int, ok bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			a.printUsage(a.stdout, fs, spec)
			return nil, exitOK, false
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "taskctl %s: %v\n\n", spec.name, err)
			a.printUsage(a.stderr, fs, spec)
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), 0, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// want checks the number of positional arguments.
func (a *app) want(spec cmdSpec, fs *flag.FlagSet, pos []string, n int, what string) bool {
	if len(pos) == n {
		return true
	}
	if len(pos) < n {
		fmt.Fprintf(a.stderr, "taskctl %s: missing %s\n\n", spec.name, what)
	} else {
		fmt.Fprintf(a.stderr, "taskctl %s: unexpected argument %q\n\n", spec.name, pos[n])
	}
	a.printUsage(a.stderr, fs, spec)
	return false
}

// apiFlag adds --api to fs; resolve the value with a.apiAddr.
func apiFlag(fs *flag.FlagSet) *string {
	return fs.String("api", "", "task-service address (default $TASKCTL_API, then the address of your last login, then "+defaultAPI+")")
}

// apiAddr resolves the API address: flag, TASKCTL_API, the last login's,
// the default.
func (a *app) apiAddr(flagValue string, cfg *config) string {
	for _, v := range []string{flagValue, a.getenv("TASKCTL_API"), cfg.API} {
		if v = strings.TrimSpace(v); v != "" {
			return strings.TrimRight(v, "/")
		}
	}
	return defaultAPI
}

// client returns a logged-in client for the API named by apiFlagValue.
// The token comes from TASKCTL_TOKEN or from the login kept for that API.
func (a *app) client(apiFlagValue string) (*client.Client, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	addr := a.apiAddr(apiFlagValue, cfg)
	c := client.New(addr, a.httpClient)
	if tok := strings.TrimSpace(a.getenv("TASKCTL_TOKEN")); tok != "" {
		c.SetToken(tok)
		return c, nil
	}
	s, ok := cfg.Sessions[addr]
	if !ok || s.Token == "" {
		return nil, &notLoggedInError{api: addr, reason: "not logged in to " + addr}
	}
	if !s.ExpiresAt.IsZero() && time.Now().After(s.ExpiresAt) {
		return nil, &notLoggedInError{api: addr, reason: fmt.Sprintf("your login to %s expired at %s", addr, s.ExpiresAt.Local().Format(time.RFC3339))}
	}
	c.SetToken(s.Token)
	return c, nil
}

// fail reports err with what to do next and returns the exit code.
func (a *app) fail(cmd string, err error) int {
	var usage *usageError
	var notLogged *notLoggedInError
	var apiErr *client.Error
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &usage):
		fmt.Fprintf(a.stderr, "taskctl %s: %v\nRun `taskctl %s --help` for the flags and an example.\n", cmd, err, cmd)
		return exitUsage
	case errors.As(err, &notLogged):
		fmt.Fprintf(a.stderr, "taskctl %s: %v\n", cmd, err)
		return exitAuth
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
		fmt.Fprintf(a.stderr, "taskctl %s: the API refused your login (%s): log in again with `taskctl login --email you@example.com`\n", cmd, apiErr.Message)
		return exitAuth
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusForbidden:
		fmt.Fprintf(a.stderr, "taskctl %s: forbidden: %s\nThis needs an admin: log in as one with `taskctl login --email admin@example.com`.\n", cmd, apiErr.Message)
		return exitAuth
	case errors.As(err, &apiErr):
		msg := apiErr.Message
		if apiErr.Field != "" && !strings.HasPrefix(msg, apiErr.Field) {
			msg = apiErr.Field + ": " + msg
		}
		fmt.Fprintf(a.stderr, "taskctl %s: %s (HTTP %d %s)\n", cmd, msg, apiErr.Status, apiErr.Code)
		return exitFailure
	case errors.As(err, &urlErr) || errors.As(err, &netErr):
		fmt.Fprintf(a.stderr, "taskctl %s: cannot reach the API: %v\nIs task-service running? Point taskctl at it with --api or TASKCTL_API.\n", cmd, err)
		return exitFailure
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(a.stderr, "taskctl %s: interrupted\n", cmd)
		return exitFailure
	default:
		fmt.Fprintf(a.stderr, "taskctl %s: %v\n", cmd, err)
		return exitFailure
	}
}

// table is an aligned table on stdout.
func (a *app) table() *tabwriter.Writer {
	return tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
}

func (a *app) printJSON(v any) int {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(a.stderr, "taskctl: write JSON: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// Display helpers.

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// clip shortens s to n runes on one line, ending with … when cut.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

const timeLayout = "2006-01-02 15:04:05"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(timeLayout)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// age is how long ago t was, short: 45s, 12m, 3h, 5d.
func age(t time.Time, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func fmtDuration(seconds *float64) string {
	if seconds == nil {
		return "-"
	}
	return (time.Duration(*seconds * float64(time.Second))).Round(time.Second).String()
}

// isTerminal reports whether w is a terminal (progress bars, prompts).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// parseArgs is parse, then a check that there are n positional arguments
// (what names them in the error).
func (a *app) parseArgs(fs *flag.FlagSet, spec cmdSpec, args []string, n int, what string) (pos []string, code int, ok bool) {
	pos, code, ok = a.parse(fs, spec, args)
	if !ok {
		return nil, code, false
	}
	if !a.want(spec, fs, pos, n, what) {
		return nil, exitUsage, false
	}
	return pos, 0, true
}

// connect returns a logged-in client for the API and a context that ends on
// Ctrl-C or SIGTERM.
func (a *app) connect(apiFlagValue string) (*client.Client, context.Context, context.CancelFunc, error) {
	c, err := a.client(apiFlagValue)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := a.signalContext()
	return c, ctx, cancel, nil
}

// apiCall is what a command that calls the API starts with.
type apiCall struct {
	pos    []string
	c      *client.Client
	ctx    context.Context
	cancel context.CancelFunc
}

// start is parseArgs then connect, for the commands that check nothing in
// between. A nil call means stop now with code (usage, help or login
// trouble, already reported).
func (a *app) start(fs *flag.FlagSet, spec cmdSpec, args []string, api *string, n int, what string) (*apiCall, int) {
	pos, code, ok := a.parseArgs(fs, spec, args, n, what)
	if !ok {
		return nil, code
	}
	c, ctx, cancel, err := a.connect(*api) // read after parse filled it
	if err != nil {
		return nil, a.fail(spec.name, err)
	}
	return &apiCall{pos: pos, c: c, ctx: ctx, cancel: cancel}, 0
}
