package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

var rulesCommand = group("rules", "Freshness rules: a watchlist of keys (NVDA: 5, INTC: 1) whose tasks are created on their own\n"+
	"when a key's newest completed task is older than the rule's max age and none is open.\n"+
	"Priority is weight × staleness (× the rising boost) through the rule's thresholds.", map[string]subcommand{
	"create": {"create a rule with its keys", (*app).rulesCreate},
	"list":   {"list rules", (*app).rulesList},
	"show":   {"show a rule and its keys: age, open task, next due", (*app).rulesShow},
	"edit":   {"change a rule (only the flags given)", (*app).rulesEdit},
	"pause":  {"pause a rule: no tasks for its keys", func(a *app, args []string) int { return a.ruleAction("pause", args) }},
	"resume": {"resume a paused rule", func(a *app, args []string) int { return a.ruleAction("resume", args) }},
	"delete": {"delete a rule (its open tasks stay)", func(a *app, args []string) int { return a.ruleAction("delete", args) }},
	"keys": {"keys set RULE --keys LIST: replace a rule's whole watchlist", func(a *app, args []string) int {
		if len(args) > 0 && args[0] == "set" {
			args = args[1:]
		}
		return a.rulesKeysSet(args)
	}},
})

// ruleFlags are the flags create and edit share.
type ruleFlags struct {
	name, typeRef, title, params, maxAge, thresholds *string
	boost                                            *float64
}

func addRuleFlags(fs *flag.FlagSet) *ruleFlags {
	return &ruleFlags{
		name:       fs.String("name", "", "the rule's name"),
		typeRef:    fs.String("type", "", "task type name or id (cannot change later)"),
		title:      fs.String("title", "", `title of each key's task, with {{key}}: "Reddit crawl for {{key}}"`),
		params:     fs.String("params", "", `params of each key's task, a JSON object with {{key}} in its strings: '{"ticker": "{{key}}"}'`),
		maxAge:     fs.String("max-age", "", "a key whose newest completed task is older gets a task: 6h, 90m (at least 1m)"),
		thresholds: fs.String("thresholds", "", "the scores at which a task is urgent,high,medium (default 20,5,2); below medium it is low"),
		boost:      fs.Float64("rising-boost", 0, "multiplies the score of a key marked rising (default 2)"),
	}
}

// rule turns the flags the user set into a request.
func (f *ruleFlags) rule(ctx context.Context, c *client.Client, set map[string]bool) (client.NewFreshnessRule, error) {
	r := client.NewFreshnessRule{Name: *f.name, TitleTemplate: *f.title, ParamsTemplate: *f.params, MaxAge: *f.maxAge, RisingBoost: *f.boost}
	if set["type"] {
		tt, err := resolveType(ctx, c, *f.typeRef)
		if err != nil {
			return r, err
		}
		r.TaskTypeID = tt.ID
	}
	if set["thresholds"] {
		parts := strings.Split(*f.thresholds, ",")
		var v [3]float64
		if len(parts) != 3 {
			return r, usagef("--thresholds %q: give three numbers, urgent,high,medium (e.g. 20,5,2)", *f.thresholds)
		}
		for i, p := range parts {
			n, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil {
				return r, usagef("--thresholds %q: %q is not a number", *f.thresholds, p)
			}
			v[i] = n
		}
		r.Thresholds = &events.PriorityThresholds{Urgent: v[0], High: v[1], Medium: v[2]}
	}
	return r, nil
}

// parseKeys reads a watchlist: KEY[:WEIGHT[:rising]] separated by commas
// or white space (weight 1 when left out), or a JSON array of
// {"key", "weight", "rising"} objects.
func parseKeys(text string) ([]events.FreshnessKey, error) {
	text = strings.TrimSpace(text)
	if strings.HasPrefix(text, "[") {
		var keys []events.FreshnessKey
		if err := json.Unmarshal([]byte(text), &keys); err != nil {
			return nil, usagef("keys: not a JSON array of {\"key\", \"weight\", \"rising\"}: %v", err)
		}
		return keys, nil
	}
	keys, err := events.ParseFreshnessKeys(text)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return keys, nil
}

// keysFlags are --keys and --keys-file.
func keysFlags(fs *flag.FlagSet) (*string, *string) {
	return fs.String("keys", "", `the watchlist: "NVDA:5,INTC:1,AMD:2:rising" (weight 1 when left out)`),
		fs.String("keys-file", "", "read the watchlist from this file (same syntax, one per line, or a JSON array); - is stdin")
}

func readKeys(keys, file string) ([]events.FreshnessKey, bool, error) {
	switch {
	case keys != "" && file != "":
		return nil, false, usagef("give --keys or --keys-file, not both")
	case file == "-":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, false, usagef("--keys-file -: %v", err)
		}
		k, err := parseKeys(string(b))
		return k, true, err
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, false, usagef("--keys-file: %v", err)
		}
		k, err := parseKeys(string(b))
		return k, true, err
	case keys != "":
		k, err := parseKeys(keys)
		return k, true, err
	}
	return nil, false, nil
}

var rulesCreateSpec = cmdSpec{
	name: "rules create", args: "--name NAME --type TYPE --title TITLE --params JSON --max-age AGE (--keys LIST | --keys-file FILE) [flags]",
	summary: "Create a freshness rule. Every key is due at once (it never completed); afterwards a key gets its next task\n" +
		"when its newest completed task is older than --max-age and none is pending or in progress.",
	example: `taskctl rules create --name watchlist --type reddit_crawl --title "Reddit crawl for {{key}}" \
  --params '{"ticker": "{{key}}"}' --max-age 6h --keys "NVDA:5,INTC:1,AMD:2:rising"`,
}

func (a *app) rulesCreate(args []string) int {
	spec := rulesCreateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	f := addRuleFlags(fs)
	keys, file := keysFlags(fs)
	asJSON := fs.Bool("json", false, "print the rule as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	set := setFlags(fs)
	for _, need := range []string{"name", "type", "title", "params", "max-age"} {
		if !set[need] {
			return a.fail(spec.name, usagef("--%s is required (see --help)", need))
		}
	}
	r, err := f.rule(call.ctx, call.c, set)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if r.Keys, _, err = readKeys(*keys, *file); err != nil {
		return a.fail(spec.name, err)
	}
	rule, err := call.c.CreateFreshnessRule(call.ctx, r)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(rule)
	}
	fmt.Fprintf(a.stdout, "Created freshness rule %q, id %s: %d keys, max age %s.\nWatch it: taskctl rules show %s\n",
		rule.Name, rule.ID, rule.KeyCount, rule.MaxAge(), rule.ID)
	return exitOK
}

var rulesListSpec = cmdSpec{name: "rules list", args: "[--json]", summary: "List freshness rules, newest first.", example: "taskctl rules list"}

func (a *app) rulesList(args []string) int {
	spec := rulesListSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the rules as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	list, err := call.c.FreshnessRules(call.ctx)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(list)
	}
	n := loadNames(call.ctx, call.c)
	tw := a.table()
	fmt.Fprintln(tw, "NAME\tSTATE\tTYPE\tKEYS\tMAX AGE\tTASKS CREATED\tID")
	for _, r := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", clip(r.Name, 40), r.State, n.taskType(r.TaskTypeID), r.KeyCount, r.MaxAge(), r.TasksCreated, r.ID)
	}
	tw.Flush()
	if len(list) == 0 {
		fmt.Fprintln(a.stdout, "(no freshness rules: taskctl rules create --help)")
	}
	return exitOK
}

// startOnRule starts a command whose one argument names a rule (by name
// or id) and finds it; call is nil when the command ends here, with code.
func (a *app) startOnRule(fs *flag.FlagSet, spec cmdSpec, args []string, api *string) (*apiCall, *events.FreshnessRule, int) {
	call, code := a.start(fs, spec, args, api, 1, "RULE (a name or id)")
	if call == nil {
		return nil, nil, code
	}
	r, err := resolveRule(call.ctx, call.c, call.pos[0])
	if err != nil {
		call.cancel()
		return nil, nil, a.fail(spec.name, err)
	}
	return call, r, 0
}

func resolveRule(ctx context.Context, c *client.Client, ref string) (*events.FreshnessRule, error) {
	if isUUID(ref) {
		return c.FreshnessRule(ctx, ref)
	}
	list, err := c.FreshnessRules(ctx)
	if err != nil {
		return nil, err
	}
	var found []events.FreshnessRule
	for _, r := range list {
		if r.Name == ref {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 1:
		return &found[0], nil
	case 0:
		return nil, usagef("no freshness rule named %q (give its name or id); see `taskctl rules list`", ref)
	}
	return nil, usagef("%d freshness rules are named %q: give the id instead", len(found), ref)
}

var rulesShowSpec = cmdSpec{
	name: "rules show", args: "RULE [--keys N] [--json]",
	summary: "Show a freshness rule (by name or id) and its keys: weight, last completion, age, open task, next due.",
	example: "taskctl rules show watchlist",
}

func (a *app) rulesShow(args []string) int {
	spec := rulesShowSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	limit := fs.Int("keys", 100, "show at most this many keys (1-1000)")
	asJSON := fs.Bool("json", false, "print the rule and its keys as JSON")
	call, r, code := a.startOnRule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	keys, err := call.c.FreshnessKeys(call.ctx, r.ID, "", *limit)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(map[string]any{"rule": r, "keys": keys})
	}
	n := loadNames(call.ctx, call.c)
	tw := a.table()
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Rule", r.Name)
	row("ID", r.ID)
	row("State", string(r.State))
	if r.PausedReason != "" {
		row("Paused because", r.PausedReason)
	}
	row("Task", fmt.Sprintf("%q of type %s", r.TitleTemplate, n.taskType(r.TaskTypeID)))
	row("Params", r.ParamsTemplate)
	row("Max age", r.MaxAge().String())
	t := r.Thresholds
	row("Priority", fmt.Sprintf("score = weight × staleness (× %g when rising): urgent ≥ %g, high ≥ %g, medium ≥ %g, else low", r.RisingBoost, t.Urgent, t.High, t.Medium))
	row("Keys", fmt.Sprintf("%d; %d tasks created", r.KeyCount, r.TasksCreated))
	tw.Flush()
	fmt.Fprintln(a.stdout)
	tw = a.table()
	fmt.Fprintln(tw, "KEY\tWEIGHT\tLAST COMPLETED\tAGE\tOPEN TASK\tNEXT DUE")
	for _, k := range keys {
		age, open, due := "never", "-", "-"
		if k.AgeSeconds != nil {
			age = time.Duration(*k.AgeSeconds * float64(time.Second)).Round(time.Second).String()
		}
		if k.CurrentTaskID != nil {
			open, due = *k.CurrentTaskID, "when it ends"
		} else if k.DueAt != nil {
			due = fmtTime(*k.DueAt)
		}
		w := strconv.Itoa(k.Weight)
		if k.Rising {
			w += " rising"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clip(k.Key, 40), w, fmtTimePtr(k.LastCompletedAt), age, open, due)
	}
	tw.Flush()
	if len(keys) < r.KeyCount {
		fmt.Fprintf(a.stdout, "(%d of %d keys: --keys N shows more)\n", len(keys), r.KeyCount)
	}
	return exitOK
}

var rulesEditSpec = cmdSpec{
	name: "rules edit", args: "RULE [flags]",
	summary: "Change a freshness rule: only the flags given change. The task type cannot change;\n" +
		"replace the keys with `taskctl rules keys set`.",
	example: `taskctl rules edit watchlist --max-age 12h --thresholds 40,10,3`,
}

func (a *app) rulesEdit(args []string) int {
	spec := rulesEditSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	f := addRuleFlags(fs)
	asJSON := fs.Bool("json", false, "print the rule as JSON")
	call, r, code := a.startOnRule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	set := setFlags(fs)
	delete(set, "api")
	delete(set, "json")
	if len(set) == 0 {
		return a.fail(spec.name, usagef("nothing to change: give at least one flag (see --help)"))
	}
	req, err := f.rule(call.ctx, call.c, set)
	if err != nil {
		return a.fail(spec.name, err)
	}
	after, err := call.c.UpdateFreshnessRule(call.ctx, r.ID, req)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(after)
	}
	fmt.Fprintf(a.stdout, "Updated freshness rule %q: max age %s.\n", after.Name, after.MaxAge())
	return exitOK
}

func (a *app) ruleAction(action string, args []string) int {
	spec := cmdSpec{name: "rules " + action, args: "RULE [--reason TEXT]",
		summary: map[string]string{
			"pause":  "Pause a freshness rule: no tasks are created for its keys until it is resumed.",
			"resume": "Resume a paused freshness rule: keys already stale get their tasks at once.",
			"delete": "Delete a freshness rule: its keys stop being watched; their open tasks stay.",
		}[action],
		example: fmt.Sprintf("taskctl rules %s watchlist", action)}
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why (pause)")
	asJSON := fs.Bool("json", false, "print the rule as JSON")
	call, r, code := a.startOnRule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	var after *events.FreshnessRule
	var err error
	if action == "delete" {
		after, err = call.c.DeleteFreshnessRule(call.ctx, r.ID)
	} else {
		after, err = call.c.FreshnessRuleAction(call.ctx, r.ID, action, *reason)
	}
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(after)
	}
	if action == "delete" {
		fmt.Fprintf(a.stdout, "Deleted freshness rule %q.\n", after.Name)
		return exitOK
	}
	fmt.Fprintf(a.stdout, "Freshness rule %q is %s.\n", after.Name, after.State)
	return exitOK
}

var rulesKeysSetSpec = cmdSpec{
	name: "rules keys set", args: "RULE (--keys LIST | --keys-file FILE)",
	summary: "Replace a rule's whole watchlist (up to 10,000 keys). Keys that stay keep their state;\n" +
		"new keys are due at once; keys left out stop being watched (their open tasks stay).",
	example: `taskctl rules keys set watchlist --keys "NVDA:5,INTC:1,AMD:2:rising,TSLA:3"`,
}

func (a *app) rulesKeysSet(args []string) int {
	spec := rulesKeysSetSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	keys, file := keysFlags(fs)
	asJSON := fs.Bool("json", false, "print the rule as JSON")
	call, r, code := a.startOnRule(fs, spec, args, api)
	if call == nil {
		return code
	}
	defer call.cancel()
	list, given, err := readKeys(*keys, *file)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if !given {
		return a.fail(spec.name, usagef("give --keys or --keys-file (an empty file stops watching every key)"))
	}
	after, err := call.c.ReplaceFreshnessKeys(call.ctx, r.ID, list)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(after)
	}
	fmt.Fprintf(a.stdout, "Freshness rule %q now watches %d keys.\n", after.Name, after.KeyCount)
	return exitOK
}
