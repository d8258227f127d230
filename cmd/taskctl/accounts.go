package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store"
)

// taskctl workers show|update|deactivate|reactivate|password (issue 11).

// accountRef finds a user, a worker or an admin, by id, email or name.
func accountRef(ctx context.Context, c *client.Client, ref string) (*store.WorkerView, error) {
	if _, err := uuid.Parse(ref); err == nil {
		return c.Worker(ctx, ref)
	}
	w, err := resolveAccount(ctx, c, ref, "any")
	if err != nil {
		return nil, err
	}
	return c.Worker(ctx, w.ID)
}

var workersShowSpec = cmdSpec{
	name: "workers show", args: "WORKER [--json]",
	summary: "Show one user (a worker or an admin, by id, email or name): roles, active or not,\n" +
		"lockout, presence, tasks.",
	example: "taskctl workers show genesis@bots.example.com",
}

func (a *app) workersShow(args []string) int {
	spec := workersShowSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the user as JSON")
	call, code := a.start(fs, spec, args, api, 1, "WORKER")
	if call == nil {
		return code
	}
	defer call.cancel()
	w, err := accountRef(call.ctx, call.c, call.pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(w)
	}
	a.printAccount(w)
	return exitOK
}

func (a *app) printAccount(w *store.WorkerView) {
	now := time.Now()
	roles := []string{}
	if w.IsAdmin {
		roles = append(roles, "admin")
	}
	if w.IsWorker {
		roles = append(roles, "worker")
	}
	state := "active"
	if !w.Active {
		state = "DEACTIVATED (cannot log in; tokens revoked)"
	}
	lock := "no"
	if w.LockedUntil != nil && w.LockedUntil.After(now) {
		lock = fmt.Sprintf("LOCKED until %s (%s left; lockout #%d)", w.LockedUntil.Local().Format("15:04:05"),
			w.LockedUntil.Sub(now).Round(time.Second), w.Lockouts)
	} else if w.Lockouts > 0 {
		lock = fmt.Sprintf("no (last lockout #%d ended %s ago)", w.Lockouts, age(*w.LockedUntil, now))
	}
	seen := "never"
	if w.LastActivityAt != nil {
		seen = age(*w.LastActivityAt, now) + " ago"
	}
	online := "no"
	if w.Online {
		online = "yes"
	}
	tw := a.table()
	fmt.Fprintf(tw, "Name\t%s\nEmail\t%s\nID\t%s\nRoles\t%s\nAccount\t%s\nLocked\t%s\n", w.FullName, w.Email, w.ID,
		strings.Join(roles, ", "), state, lock)
	if w.IsWorker {
		fmt.Fprintf(tw, "Online\t%s (last heartbeat %s, status %s)\nTasks\t%d running of %d, %d done today\n",
			online, seen, orDash(deref(w.HeartbeatStatus)), w.InProgressCount, w.MaxConcurrentTasks, w.CompletedToday)
	}
	fmt.Fprintf(tw, "Created\t%s\n", w.CreatedAt.Local().Format("2006-01-02 15:04:05"))
	tw.Flush()
}

var workersUpdateSpec = cmdSpec{
	name: "workers update", args: "WORKER [--name NAME] [--max-concurrent N] [--admin=true|false] [--worker=true|false]",
	summary: "Change a user's name, capacity or roles. A role change revokes the user's tokens: it\n" +
		"logs in again.",
	example: "taskctl workers update genesis@bots.example.com --max-concurrent 4",
}

func (a *app) workersUpdate(args []string) int {
	spec := workersUpdateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	name := fs.String("name", "", "new display name")
	maxConc := fs.Int("max-concurrent", 0, "tasks it may hold at once (1-100)")
	admin := optionalBool(fs, "admin", "give (true) or take (false) the admin role")
	worker := optionalBool(fs, "worker", "give (true) or take (false) the worker role")
	asJSON := fs.Bool("json", false, "print the user as JSON")
	call, code := a.start(fs, spec, args, api, 1, "WORKER")
	if call == nil {
		return code
	}
	defer call.cancel()
	var e client.WorkerEdit
	if *name != "" {
		e.FullName = name
	}
	if *maxConc != 0 {
		e.MaxConcurrentTasks = maxConc
	}
	e.IsAdmin, e.IsWorker = admin.value, worker.value
	if e == (client.WorkerEdit{}) {
		return a.fail(spec.name, usagef("nothing to change: give --name, --max-concurrent, --admin or --worker"))
	}
	w, err := accountRef(call.ctx, call.c, call.pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if w, err = call.c.UpdateWorker(call.ctx, w.ID, e); err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(w)
	}
	a.printAccount(w)
	return exitOK
}

// boolFlag is a flag that may be left out (nil) or set true or false.
type boolFlag struct{ value *bool }

func (b *boolFlag) String() string {
	if b.value == nil {
		return ""
	}
	return fmt.Sprint(*b.value)
}

func (b *boolFlag) Set(s string) error {
	switch s {
	case "true":
		v := true
		b.value = &v
	case "false":
		v := false
		b.value = &v
	default:
		return fmt.Errorf("say true or false, not %q", s)
	}
	return nil
}

func (b *boolFlag) IsBoolFlag() bool { return true }

func optionalBool(fs *flag.FlagSet, name, usage string) *boolFlag {
	b := &boolFlag{}
	fs.Var(b, name, usage)
	return b
}

var workersDeactivateSpec = cmdSpec{
	name: "workers deactivate", args: "WORKER [--reason TEXT]",
	summary: "Deactivate a user: it can no longer log in, its tokens stop working on every instance\n" +
		"within a second, and the tasks it holds go back to the pool with the reason.",
	example: `taskctl workers deactivate genesis@bots.example.com --reason "machine retired"`,
}

func (a *app) workersDeactivate(args []string) int {
	return a.workersActivation(workersDeactivateSpec, args, (*client.Client).DeactivateWorker)
}

var workersReactivateSpec = cmdSpec{
	name: "workers reactivate", args: "WORKER [--reason TEXT]",
	summary: "Let a deactivated user log in again (tokens from before stay revoked).",
	example: "taskctl workers reactivate genesis@bots.example.com",
}

func (a *app) workersReactivate(args []string) int {
	return a.workersActivation(workersReactivateSpec, args, (*client.Client).ReactivateWorker)
}

func (a *app) workersActivation(spec cmdSpec, args []string,
	do func(*client.Client, context.Context, string, string) (*store.WorkerView, error)) int {
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why (kept in the event)")
	asJSON := fs.Bool("json", false, "print the user as JSON")
	call, code := a.start(fs, spec, args, api, 1, "WORKER")
	if call == nil {
		return code
	}
	defer call.cancel()
	w, err := accountRef(call.ctx, call.c, call.pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if w, err = do(call.c, call.ctx, w.ID, *reason); err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(w)
	}
	a.printAccount(w)
	return exitOK
}

var workersPasswordSpec = cmdSpec{
	name: "workers password", args: "WORKER [--password PW]",
	summary: "Set a user's password (asked without echo, or $TASKCTL_WORKER_PASSWORD). Its tokens\n" +
		"stop working and any lockout ends.",
	example: "taskctl workers password genesis@bots.example.com",
}

func (a *app) workersPassword(args []string) int {
	spec := workersPasswordSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	password := fs.String("password", "", "the new password, 8-72 characters (default $TASKCTL_WORKER_PASSWORD, else asked)")
	call, code := a.start(fs, spec, args, api, 1, "WORKER")
	if call == nil {
		return code
	}
	defer call.cancel()
	w, err := accountRef(call.ctx, call.c, call.pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	pw := *password
	if pw == "" {
		pw = a.getenv("TASKCTL_WORKER_PASSWORD")
	}
	if pw == "" {
		if pw, err = a.readPassword(fmt.Sprintf("New password for %s: ", w.Email)); err != nil {
			return a.fail(spec.name, err)
		}
	}
	if _, err := call.c.ResetPassword(call.ctx, w.ID, pw); err != nil {
		return a.fail(spec.name, err)
	}
	fmt.Fprintf(a.stdout, "Password of %s <%s> changed; its earlier tokens no longer work.\n", w.FullName, w.Email)
	return exitOK
}
