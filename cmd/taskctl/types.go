package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

var typesCommand = group("types", "Define the kinds of work: each type has an SOP for workers and a JSON Schema for params.", map[string]subcommand{
	"create": {"create a task type (SOP and schema from files)", (*app).typesCreate},
	"list":   {"list task types", (*app).typesList},
	"show":   {"show a type with its SOP and schema, its limits and their use", (*app).typesShow},
	"limit":  {"set a type's limits: tasks in progress, claims per window, per key of its params", (*app).typesLimit},
	"budget": {"set a type's daily LLM budgets: tokens and US dollars per team day", (*app).typesBudget},
	"pause":  {"stop claims of a type's tasks (they stay pending), with a reason", (*app).typesPause},
	"resume": {"let claims take a paused type's tasks again", (*app).typesResume},
})

var typesCreateSpec = cmdSpec{
	name: "types create", args: "--name NAME [flags]",
	summary: "Create a task type. The SOP (what a worker must do, in Markdown) comes from --sop-file and\n" +
		"the params' JSON Schema from --schema-file; tasks of the type must satisfy that schema.",
	example: `taskctl types create --name code_review --label "Code review" \
  --sop-file sops/code_review.md --schema-file schemas/code_review.json \
  --max-retries 2 --timeout 45m --backoff 30s --max-in-progress 10 --rate 50/1m --key '$.repo' --per-key 1`,
}

func (a *app) typesCreate(args []string) int {
	spec := typesCreateSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	name := fs.String("name", "", "lower_snake_case name (required)")
	label := fs.String("label", "", "display name (default: the name)")
	desc := fs.String("description", "", "what the type is for")
	sopFile := fs.String("sop-file", "", "the SOP, a Markdown file")
	schemaFile := fs.String("schema-file", "", "the params' JSON Schema, a JSON file")
	maxRetries := fs.Int("max-retries", -1, "automatic retries after a failure (default: the server's, 3)")
	timeout := fs.Duration("timeout", 0, "fail a task in progress for longer than this (0: never)")
	backoff := fs.Duration("backoff", 0, "wait this long before a retry can be claimed")
	lf := addLimitFlags(fs)
	alias := fs.String("alias", "", "a short unique name people type: /add ALIAS NVDA in Telegram")
	template := fs.String("params-template", "", `the params of a task made from a key, with {{key}} and {{name}} placeholders: '{"ticker": "{{key}}"}'`)
	bf := addBudgetFlags(fs)
	asJSON := fs.Bool("json", false, "print the type as JSON")
	_, code, ok := a.parseArgs(fs, spec, args, 0, "")
	if !ok {
		return code
	}
	if strings.TrimSpace(*name) == "" {
		return a.fail(spec.name, usagef("--name is required"))
	}
	limits, err := lf.limits()
	if err != nil {
		return a.fail(spec.name, err)
	}
	sop, err := textArg("", *sopFile, "sop")
	if err != nil {
		return a.fail(spec.name, err)
	}
	schema, err := jsonArg("", *schemaFile, "schema")
	if err != nil {
		return a.fail(spec.name, err)
	}
	nt := client.NewTaskType{Name: *name, Label: *label, Description: *desc, SOP: sop, ParamSchema: schema,
		TimeoutSeconds: int(timeout.Seconds()), RetryBackoffSeconds: int(backoff.Seconds()),
		MaxInProgress: limits.MaxInProgress, RateLimit: limits.RateLimit, ConcurrencyKey: limits.ConcurrencyKey,
		MaxInProgressPerKey: limits.MaxInProgressPerKey, Alias: *alias}
	if nt.ParamsTemplate, err = jsonArg(*template, "", "params-template"); err != nil {
		return a.fail(spec.name, err)
	}
	nt.DailyTokenBudget, nt.DailyCostBudgetUSD = bf.budgets()
	if *maxRetries >= 0 {
		nt.MaxRetries = maxRetries
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	tt, err := c.CreateTaskType(ctx, nt)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(tt)
	}
	fmt.Fprintf(a.stdout, "Created task type %s (%s), id %s.\nCreate a task: taskctl tasks create --type %s --title \"...\" --params '{...}'\n",
		tt.Name, tt.Label, tt.ID, tt.Name)
	return exitOK
}

var typesListSpec = cmdSpec{
	name: "types list", args: "[--archived] [--json]",
	summary: "List task types by name.",
	example: "taskctl types list --archived",
}

func (a *app) typesList(args []string) int {
	spec := typesListSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	archived := fs.Bool("archived", false, "include archived types")
	asJSON := fs.Bool("json", false, "print the types as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	c, ctx := call.c, call.ctx
	types, err := c.TaskTypes(ctx, *archived)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(types)
	}
	tw := a.table()
	fmt.Fprintln(tw, "NAME\tLABEL\tRETRIES\tTIMEOUT\tBACKOFF\tSTATE\tID")
	for _, t := range types {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, clip(t.Label, 40), t.MaxRetries,
			seconds(t.TimeoutSeconds), seconds(t.RetryBackoffSeconds), typeState(&t), t.ID)
	}
	tw.Flush()
	if len(types) == 0 {
		fmt.Fprintln(a.stdout, "(no task types yet: taskctl types create --help)")
	}
	return exitOK
}

// typeState is archived, "paused: reason" or active.
func typeState(t *events.TaskType) string {
	switch {
	case t.Archived:
		return "archived"
	case t.Paused:
		return "paused: " + clip(t.PauseReason, 60)
	}
	return "active"
}

func seconds(n int) string {
	if n == 0 {
		return "-"
	}
	return (time.Duration(n) * time.Second).String()
}

var typesShowSpec = cmdSpec{
	name: "types show", args: "TYPE [--json]",
	summary: "Show a task type (by name or id) with its SOP and params schema.",
	example: "taskctl types show code_review",
}

func (a *app) typesShow(args []string) int {
	spec := typesShowSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the type as JSON")
	call, code := a.start(fs, spec, args, api, 1, "TYPE (a name or id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	pos, c, ctx := call.pos, call.c, call.ctx
	tt, err := resolveType(ctx, c, pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	usage, err := c.TaskTypeUsage(ctx, tt.ID)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(struct {
			*events.TaskType
			Usage *store.TypeUsage `json:"usage"`
		}{tt, usage})
	}
	a.printType(tt, usage)
	return exitOK
}

func (a *app) printType(tt *events.TaskType, u *store.TypeUsage) {
	tw := a.table()
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Type", tt.Name)
	row("Label", tt.Label)
	row("ID", tt.ID)
	row("Max retries", fmt.Sprint(tt.MaxRetries))
	row("Timeout", seconds(tt.TimeoutSeconds))
	row("Retry backoff", seconds(tt.RetryBackoffSeconds))
	row("Archived", fmt.Sprint(tt.Archived))
	if tt.Paused {
		row("Paused", fmt.Sprintf("%s (by %s, %s)", tt.PauseReason, tt.PausedBy, fmtTimePtr(tt.PausedAt)))
	}
	for _, l := range limitLines(tt, u) {
		row(l[0], l[1])
	}
	if tt.Alias != "" {
		row("Alias", tt.Alias)
	}
	if tt.ParamsTemplate != nil {
		row("Params template", string(tt.ParamsTemplate))
	}
	if b := tt.DailyTokenBudget; b != nil {
		row("Daily token budget", fmt.Sprint(*b))
	}
	if b := tt.DailyCostBudgetUSD; b != nil {
		row("Daily cost budget", fmt.Sprintf("%.2f USD", *b))
	}
	row("Created", fmtTime(tt.CreatedAt))
	row("Updated", fmtTime(tt.UpdatedAt))
	tw.Flush()
	if tt.Description != "" {
		fmt.Fprintf(a.stdout, "\nDescription:\n%s\n", indent(tt.Description))
	}
	sop := tt.SOP
	if strings.TrimSpace(sop) == "" {
		sop = "(none)"
	}
	fmt.Fprintf(a.stdout, "\nSOP:\n%s\n", indent(sop))
	var schema bytes.Buffer
	if json.Indent(&schema, tt.ParamSchema, "", "  ") != nil {
		schema.Reset()
		schema.Write(tt.ParamSchema)
	}
	fmt.Fprintf(a.stdout, "\nParams schema:\n%s\n", indent(schema.String()))
}

var typesPauseSpec = cmdSpec{
	name: "types pause", args: "TYPE --reason TEXT [--json]",
	summary: "Pause a task type: claims skip its tasks, which stay pending and visible, until it is resumed.\n" +
		"Waiting workers get them as soon as it is.",
	example: `taskctl types pause reddit_crawl --reason "Reddit API returns 429"`,
}

func (a *app) typesPause(args []string) int {
	spec := typesPauseSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why (required): shown on the type, the dashboard and in Telegram")
	asJSON := fs.Bool("json", false, "print the type as JSON")
	return a.typeAction(spec, fs, api, args, asJSON, func(ctx context.Context, c *client.Client, id string) (*events.TaskType, error) {
		if strings.TrimSpace(*reason) == "" {
			return nil, usagef("--reason is required")
		}
		return c.PauseTaskType(ctx, id, *reason)
	})
}

var typesResumeSpec = cmdSpec{
	name: "types resume", args: "TYPE [--reason TEXT] [--json]",
	summary: "Resume a paused task type: its pending tasks are claimable again at once.",
	example: `taskctl types resume reddit_crawl --reason "rate limit reset"`,
}

func (a *app) typesResume(args []string) int {
	spec := typesResumeSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	reason := fs.String("reason", "", "why, if worth saying")
	asJSON := fs.Bool("json", false, "print the type as JSON")
	return a.typeAction(spec, fs, api, args, asJSON, func(ctx context.Context, c *client.Client, id string) (*events.TaskType, error) {
		return c.ResumeTaskType(ctx, id, *reason)
	})
}

// typeAction runs act on the type named by the one argument and prints it.
func (a *app) typeAction(spec cmdSpec, fs *flag.FlagSet, api *string, args []string, asJSON *bool,
	act func(context.Context, *client.Client, string) (*events.TaskType, error)) int {
	call, code := a.start(fs, spec, args, api, 1, "TYPE (a name or id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	tt, err := resolveType(call.ctx, call.c, call.pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if tt, err = act(call.ctx, call.c, tt.ID); err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(tt)
	}
	fmt.Fprintf(a.stdout, "Task type %s: %s\n", tt.Name, typeState(tt))
	if tt.HasLimits() {
		fmt.Fprintf(a.stdout, "Limits: %s\n", tt.TypeLimits.Describe())
	}
	return exitOK
}

// limitLines are a type's limits with their use now, as rows of a table.
func limitLines(tt *events.TaskType, u *store.TypeUsage) [][2]string {
	var out [][2]string
	inProgress := fmt.Sprintf("%d in progress now", u.InProgress)
	if tt.MaxInProgress != nil {
		out = append(out, [2]string{"Max in progress", fmt.Sprintf("%d (%s)", *tt.MaxInProgress, inProgress)})
	}
	if r := tt.RateLimit; r != nil {
		claims := 0
		if u.ClaimsInWindow != nil {
			claims = *u.ClaimsInWindow
		}
		use := fmt.Sprintf("%d claims in the last %s", claims, r.Per)
		if u.NextSlotAt != nil {
			use += ", full until " + fmtTime(*u.NextSlotAt)
		}
		out = append(out, [2]string{"Rate limit", fmt.Sprintf("%d per %s (%s)", r.Count, r.Per, use)})
	}
	if tt.ConcurrencyKey != "" && tt.MaxInProgressPerKey != nil {
		use := fmt.Sprintf("%d keys in progress, %d at the limit", u.KeysInProgress, u.KeysAtLimit)
		for i, k := range u.Keys {
			if i == 5 {
				use += ", …"
				break
			}
			use += fmt.Sprintf("; %q %d", k.Key, k.InProgress)
		}
		out = append(out, [2]string{"Per key", fmt.Sprintf("%d in progress per %s (%s)", *tt.MaxInProgressPerKey, tt.ConcurrencyKey, use)})
	}
	if len(out) == 0 {
		out = append(out, [2]string{"Limits", "none (" + inProgress + ")"})
	}
	return out
}

var typesLimitSpec = cmdSpec{
	name: "types limit", args: "TYPE [--max-in-progress N] [--rate COUNT/WINDOW] [--key PATH --per-key N] [--none] [--json]",
	summary: "Set a task type's limits, replacing the ones it has: the most tasks in progress across the fleet,\n" +
		"the most claims in any sliding window, and the most tasks in progress per key of the params (a JSON\n" +
		"path such as $.ticker). Claims hold to them on every instance; a task held back stays pending and\n" +
		"is claimed as soon as a slot frees. --none removes them all.",
	example: `taskctl types limit reddit_crawl --max-in-progress 10 --rate 50/1m --key '$.ticker' --per-key 1`,
}

func (a *app) typesLimit(args []string) int {
	spec := typesLimitSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	lf := addLimitFlags(fs)
	none := fs.Bool("none", false, "remove every limit")
	asJSON := fs.Bool("json", false, "print the type as JSON")
	return a.typeAction(spec, fs, api, args, asJSON, func(ctx context.Context, c *client.Client, id string) (*events.TaskType, error) {
		var l events.TypeLimits
		if !*none {
			var err error
			if l, err = lf.limits(); err != nil {
				return nil, err
			}
			if !l.HasLimits() && l.ConcurrencyKey == "" {
				return nil, usagef("give at least one limit, or --none")
			}
		}
		tt, err := c.TaskType(ctx, id)
		if err != nil {
			return nil, err
		}
		return c.UpdateTaskType(ctx, id, client.NewTaskType{Name: tt.Name, Label: tt.Label, Description: tt.Description,
			SOP: tt.SOP, ParamSchema: tt.ParamSchema, MaxRetries: &tt.MaxRetries, TimeoutSeconds: tt.TimeoutSeconds,
			RetryBackoffSeconds: tt.RetryBackoffSeconds, MaxInProgress: l.MaxInProgress, RateLimit: l.RateLimit,
			ConcurrencyKey: l.ConcurrencyKey, MaxInProgressPerKey: l.MaxInProgressPerKey,
			Alias: tt.Alias, ParamsTemplate: tt.ParamsTemplate,
			DailyTokenBudget: tt.DailyTokenBudget, DailyCostBudgetUSD: tt.DailyCostBudgetUSD})
	})
}

var typesBudgetSpec = cmdSpec{
	name: "types budget", args: "TYPE [--daily-tokens N] [--daily-usd X] [--none] [--json]",
	summary: "Set a task type's daily LLM budgets, replacing the ones it has: the tokens (input, output and\n" +
		"both cache kinds) and the US dollars its tasks may use per team day (DIGEST_TZ). When the day's\n" +
		"usage reaches one, the type is paused (by \"budget\") until the day turns, or until resumed by hand.\n" +
		"--none removes them.",
	example: `taskctl types budget reddit_crawl --daily-tokens 5000000 --daily-usd 25`,
}

func (a *app) typesBudget(args []string) int {
	spec := typesBudgetSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	bf := addBudgetFlags(fs)
	none := fs.Bool("none", false, "remove both budgets")
	asJSON := fs.Bool("json", false, "print the type as JSON")
	return a.typeAction(spec, fs, api, args, asJSON, func(ctx context.Context, c *client.Client, id string) (*events.TaskType, error) {
		tokens, usd := bf.budgets()
		if !*none && tokens == nil && usd == nil {
			return nil, usagef("give --daily-tokens, --daily-usd or both, or --none")
		}
		if *none {
			tokens, usd = nil, nil
		}
		tt, err := c.TaskType(ctx, id)
		if err != nil {
			return nil, err
		}
		return c.UpdateTaskType(ctx, id, client.NewTaskType{Name: tt.Name, Label: tt.Label, Description: tt.Description,
			SOP: tt.SOP, ParamSchema: tt.ParamSchema, MaxRetries: &tt.MaxRetries, TimeoutSeconds: tt.TimeoutSeconds,
			RetryBackoffSeconds: tt.RetryBackoffSeconds, MaxInProgress: tt.MaxInProgress, RateLimit: tt.RateLimit,
			ConcurrencyKey: tt.ConcurrencyKey, MaxInProgressPerKey: tt.MaxInProgressPerKey,
			Alias: tt.Alias, ParamsTemplate: tt.ParamsTemplate, DailyTokenBudget: tokens, DailyCostBudgetUSD: usd})
	})
}

// budgetFlags are the flags that set a type's daily LLM budgets.
type budgetFlags struct {
	tokens *int64
	usd    *float64
}

func addBudgetFlags(fs *flag.FlagSet) budgetFlags {
	return budgetFlags{
		tokens: fs.Int64("daily-tokens", 0, "LLM tokens the type may use per team day; reaching it pauses the type until the day turns (0: no budget)"),
		usd:    fs.Float64("daily-usd", 0, "LLM cost in US dollars the type may use per team day (0: no budget)"),
	}
}

// budgets reads the flags; 0 is none, the server checks the values.
func (f budgetFlags) budgets() (*int64, *float64) {
	var tokens *int64
	var usd *float64
	if *f.tokens != 0 {
		tokens = f.tokens
	}
	if *f.usd != 0 {
		usd = f.usd
	}
	return tokens, usd
}

// limitFlags are the flags that set a type's limits.
type limitFlags struct {
	maxInProgress, perKey *int
	rate, key             *string
}

func addLimitFlags(fs *flag.FlagSet) limitFlags {
	return limitFlags{
		maxInProgress: fs.Int("max-in-progress", 0, "the most tasks of the type in progress at once across the fleet (0: no limit)"),
		rate:          fs.String("rate", "", "the most claims per sliding window, as COUNT/WINDOW: 50/1m, 1000/1h"),
		key:           fs.String("key", "", "a JSON path into params whose value is the concurrency key, e.g. $.ticker"),
		perKey:        fs.Int("per-key", 0, "with --key: the most tasks of one key in progress at once"),
	}
}

// limits reads the flags; the server checks the values and names the
// field at fault.
func (f limitFlags) limits() (events.TypeLimits, error) {
	var l events.TypeLimits
	if *f.maxInProgress != 0 {
		l.MaxInProgress = f.maxInProgress
	}
	if *f.rate != "" {
		count, per, ok := strings.Cut(*f.rate, "/")
		n, err := strconv.Atoi(count)
		if !ok || err != nil {
			return l, usagef("--rate must be COUNT/WINDOW, like 50/1m")
		}
		l.RateLimit = &events.RateLimit{Count: n, Per: per}
	}
	l.ConcurrencyKey = *f.key
	if *f.perKey != 0 {
		l.MaxInProgressPerKey = f.perKey
	}
	return l, nil
}
