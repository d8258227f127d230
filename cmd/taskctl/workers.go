package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
)

var workersCommand = group("workers", "Create, change, deactivate and reset the accounts workers log in with; see what they are doing.", map[string]subcommand{
	"create": {"create a worker account", (*app).workersCreate},
	"list":   {"list workers with their activity and free slots", (*app).workersList},

	"show":       {"show one user: roles, active, lockout, presence", (*app).workersShow},
	"update":     {"change a user's name, capacity or roles", (*app).workersUpdate},
	"deactivate": {"deactivate a user: no login, tokens revoked, its tasks released", (*app).workersDeactivate},
	"reactivate": {"let a deactivated user log in again", (*app).workersReactivate},
	"password":   {"set a user's password (revokes its tokens, ends a lockout)", (*app).workersPassword},
})

var workersCreateSpec = cmdSpec{
	name: "workers create", args: "--email EMAIL --name NAME [flags]",
	summary: "Create an account: a worker, with --admin an admin too, with --admin --worker=false an\n" +
		"admin only. Without --password (or $TASKCTL_WORKER_PASSWORD) a random password is made and\n" +
		"printed once: give it to the worker (task-worker, a ClawdBot) or the admin to log in.",
	example: "taskctl workers create --email genesis@bots.example.com --name Genesis --max-concurrent 2\n" +
		"taskctl workers create --email ops@example.com --name Ops --admin --worker=false",
}

func (a *app) workersCreate(args []string) int {
	spec := workersCreateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	email := fs.String("email", "", "the worker's login (required)")
	name := fs.String("name", "", "display name (required)")
	password := fs.String("password", "", "password, 8-72 characters (default $TASKCTL_WORKER_PASSWORD, else generated)")
	maxConc := fs.Int("max-concurrent", 1, "tasks it may hold at once (1-100)")
	admin := fs.Bool("admin", false, "an admin too")
	worker := fs.Bool("worker", true, "a worker (--worker=false with --admin: an admin only)")
	asJSON := fs.Bool("json", false, "print the worker as JSON")
	_, code, ok := a.parseArgs(fs, spec, args, 0, "")
	if !ok {
		return code
	}
	if strings.TrimSpace(*email) == "" || strings.TrimSpace(*name) == "" {
		return a.fail(spec.name, usagef("--email and --name are required"))
	}
	pw, generated := *password, false
	if pw == "" {
		pw = a.getenv("TASKCTL_WORKER_PASSWORD")
	}
	if pw == "" {
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			return a.fail(spec.name, err)
		}
		pw, generated = base64.RawURLEncoding.EncodeToString(b), true
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	u, err := c.CreateWorker(ctx, client.NewWorker{Email: *email, Password: pw, FullName: *name, MaxConcurrentTasks: *maxConc,
		IsAdmin: *admin, IsWorker: worker})
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		out := map[string]any{"worker": u}
		if generated {
			out["password"] = pw
		}
		return a.printJSON(out)
	}
	if u.IsWorker {
		fmt.Fprintf(a.stdout, "Created %s %s <%s>, id %s, up to %d tasks at once.\n", roleNames(u.IsAdmin, u.IsWorker), u.FullName, u.Email, u.ID, u.MaxConcurrentTasks)
	} else {
		fmt.Fprintf(a.stdout, "Created admin %s <%s>, id %s.\n", u.FullName, u.Email, u.ID)
	}
	if generated {
		fmt.Fprintf(a.stdout, "Password (shown once): %s\n", pw)
	}
	return exitOK
}

var workersListSpec = cmdSpec{
	name: "workers list", args: "[--role worker|admin|any] [--limit N] [--after CURSOR] [--json]",
	summary: "List workers (or, with --role, admins or every account) by name, one page at a time (--after\n" +
		"continues): online or not, last heartbeat, tasks in progress and waiting, free slots.",
	example: "taskctl workers list\ntaskctl workers list --role any --limit 100",
}

func (a *app) workersList(args []string) int {
	spec := workersListSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	role := fs.String("role", "worker", "which accounts: worker, admin or any")
	limit := fs.Int("limit", 50, "page size (1-200)")
	after := fs.String("after", "", "continue after this cursor (printed under a full page)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	c, ctx := call.c, call.ctx
	if *limit < 1 {
		return a.fail(spec.name, usagef("--limit must be from 1 to 200"))
	}
	page, err := c.AccountsPage(ctx, client.AccountQuery{Role: *role, After: *after, Limit: *limit})
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(page)
	}
	ws := page.Workers
	now := time.Now()
	tw := a.table()
	fmt.Fprintln(tw, "NAME\tEMAIL\tROLES\tONLINE\tLAST SEEN\tSTATUS\tRUNNING\tWAITING\tFREE\tDONE TODAY\tID")
	for _, w := range ws {
		seen := "never"
		if w.LastActivityAt != nil {
			seen = age(*w.LastActivityAt, now) + " ago"
		}
		online := "no"
		if w.Online {
			online = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\n", w.FullName, w.Email, roleNames(w.IsAdmin, w.IsWorker), online, seen,
			orDash(deref(w.HeartbeatStatus)), w.InProgressCount, w.MaxConcurrentTasks, w.PendingCount, w.AvailableSlots, w.CompletedToday, w.ID)
	}
	tw.Flush()
	if len(ws) == 0 && *after == "" {
		fmt.Fprintln(a.stdout, "(no workers yet: taskctl workers create --help)")
	}
	if page.NextCursor != "" {
		fmt.Fprintf(a.stdout, "More: taskctl workers list %s--after %s\n", relist(args), page.NextCursor)
	}
	return exitOK
}

// roleNames says an account's roles: worker, admin, or admin+worker.
func roleNames(isAdmin, isWorker bool) string {
	switch {
	case isAdmin && isWorker:
		return "admin+worker"
	case isAdmin:
		return "admin"
	}
	return "worker"
}
