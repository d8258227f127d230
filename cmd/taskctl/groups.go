package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// subcommand is one verb of a command group (tasks create, types list).
type subcommand struct {
	summary string
	run     func(a *app, args []string) int
}

// groupVerbs are each command group's verbs with their summaries, for
// shell completion.
var groupVerbs = map[string]map[string]string{}

// group runs the verb named by args[0] of a command group.
func group(name, summary string, subs map[string]subcommand) func(a *app, args []string) int {
	groupVerbs[name] = map[string]string{}
	for v, sub := range subs {
		groupVerbs[name][v] = sub.summary
	}
	return func(a *app, args []string) int {
		args, err := hoistGlobalFlags(args)
		if err != nil {
			fmt.Fprintf(a.stderr, "taskctl %s: %v\n", name, err)
			return exitUsage
		}
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			w := a.stdout
			code := exitOK
			if len(args) == 0 {
				w, code = a.stderr, exitUsage
			}
			fmt.Fprintf(w, "Usage: taskctl %s VERB [flags]\n\n%s\n\nVerbs:\n", name, summary)
			verbs := make([]string, 0, len(subs))
			for v := range subs {
				verbs = append(verbs, v)
			}
			sort.Strings(verbs)
			for _, v := range verbs {
				fmt.Fprintf(w, "  %-8s %s\n", v, subs[v].summary)
			}
			fmt.Fprintf(w, "\nRun `taskctl %s VERB --help` for a verb's flags and an example.\n", name)
			return code
		}
		sub, ok := subs[args[0]]
		if !ok {
			fmt.Fprintf(a.stderr, "taskctl %s: unknown verb %q; run `taskctl %s --help`\n", name, args[0], name)
			return exitUsage
		}
		return sub.run(a, args[1:])
	}
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// resolveType finds a task type by id or by name.
func resolveType(ctx context.Context, c *client.Client, ref string) (*events.TaskType, error) {
	if isUUID(ref) {
		return c.TaskType(ctx, ref)
	}
	types, err := c.TaskTypes(ctx, true)
	if err != nil {
		return nil, err
	}
	for i := range types {
		if types[i].Name == ref {
			return &types[i], nil
		}
	}
	names := make([]string, 0, len(types))
	for _, t := range types {
		names = append(names, t.Name)
	}
	return nil, usagef("no task type named %q (there are: %s); see `taskctl types list`", ref, orDash(strings.Join(names, ", ")))
}

// resolveWorker finds a worker by id, email or full name.
func resolveWorker(ctx context.Context, c *client.Client, ref string) (*store.WorkerView, error) {
	return resolveAccount(ctx, c, ref, "worker")
}

// resolveAccount finds an account with role (worker, admin or any) by id,
// email or name.
func resolveAccount(ctx context.Context, c *client.Client, ref, role string) (*store.WorkerView, error) {
	workers, err := c.Accounts(ctx, role)
	if err != nil {
		return nil, err
	}
	var found []*store.WorkerView
	for i := range workers {
		w := &workers[i]
		if w.ID == ref || strings.EqualFold(w.Email, ref) || strings.EqualFold(w.FullName, ref) {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, usagef("no worker %q (give an id, an email or a name); see `taskctl workers list`", ref)
	}
	return nil, usagef("%d workers are named %q: give the email or id instead", len(found), ref)
}

// names maps user and type ids to display names for tables; lookups that
// fail leave ids as they are.
type names struct {
	users map[string]string
	types map[string]string
}

func loadNames(ctx context.Context, c *client.Client) names {
	n := names{users: map[string]string{}, types: map[string]string{}}
	if ws, err := c.Workers(ctx); err == nil {
		for _, w := range ws {
			n.users[w.ID] = w.FullName
		}
	}
	if ts, err := c.TaskTypes(ctx, true); err == nil {
		for _, t := range ts {
			n.types[t.ID] = t.Name
		}
	}
	return n
}

func (n names) user(id *string) string {
	if id == nil {
		return "-"
	}
	if name, ok := n.users[*id]; ok {
		return name
	}
	return *id
}

func (n names) taskType(id string) string {
	if name, ok := n.types[id]; ok {
		return name
	}
	return id
}

// taskExists tells a missing task from a missing route after a 404.
func taskExists(ctx context.Context, c *client.Client, id string) bool {
	_, err := c.Task(ctx, id)
	return err == nil
}
