package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/clawdbot/task-service/store"
)

var usageSpec = cmdSpec{
	name: "usage", args: "[TASK] [--json]",
	summary: "LLM usage: today's tokens and cost per task type against its daily budgets (the team's\n" +
		"day, DIGEST_TZ); with a task id, the task's usage and its retry chain's.",
	example: "taskctl usage\n  taskctl usage 0193a1b2-...",
}

func (a *app) usage(args []string) int {
	spec := usageSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the usage as JSON")
	pos, code, ok := a.parse(fs, spec, args)
	if !ok {
		return code
	}
	if len(pos) > 1 && !a.want(spec, fs, pos, 1, "") {
		return exitUsage
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	if len(pos) == 1 {
		u, err := c.TaskLLMUsage(ctx, pos[0])
		if err != nil {
			return a.fail(spec.name, err)
		}
		if *asJSON {
			return a.printJSON(u)
		}
		tw := a.table()
		fmt.Fprintln(tw, "\tREPORTS\tTOKENS\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE\tCOST USD")
		printUsageRow(tw, "task "+u.TaskID, u.Task)
		printUsageRow(tw, "chain "+u.RootTaskID, u.Chain)
		tw.Flush()
		return exitOK
	}
	types, err := c.LLMUsageToday(ctx)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(types)
	}
	tw := a.table()
	fmt.Fprintln(tw, "TYPE\tDAY\tTOKENS\tTOKEN BUDGET\tCOST USD\tCOST BUDGET\tREPORTS\tUNPRICED\tSTATE")
	for _, u := range types {
		tokenBudget, costBudget := "-", "-"
		if b := u.DailyTokenBudget; b != nil {
			tokenBudget = strconv.FormatInt(*b, 10)
		}
		if b := u.DailyCostBudgetUSD; b != nil {
			costBudget = fmt.Sprintf("%.2f", *b)
		}
		state := "running"
		if u.Paused {
			state = "paused by " + u.PausedBy
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.4f\t%s\t%d\t%d\t%s\n", u.Name, u.Day, u.Usage.Tokens, tokenBudget,
			u.Usage.CostUSD, costBudget, u.Usage.Reports, u.Usage.UnpricedReports, state)
	}
	tw.Flush()
	return exitOK
}

func printUsageRow(tw *tabwriter.Writer, label string, u store.UsageTotals) {
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.4f\n", label, u.Reports, u.Tokens, u.InputTokens, u.OutputTokens,
		u.CacheReadTokens, u.CacheWriteTokens, u.CostUSD)
}
