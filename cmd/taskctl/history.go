package main

import (
	"fmt"

	"github.com/clawdbot/task-service/api/client"
)

var historySpec = cmdSpec{
	name: "history", args: "TASK [--json]",
	summary: "Show a task's history: every event of its stream, oldest first, with the time, who caused it\n" +
		"(an admin, a worker or a part of the system) and a one-line summary.",
	example: "taskctl history 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d",
}

func (a *app) history(args []string) int {
	spec := historySpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the events as JSON")
	call, code := a.start(fs, spec, args, api, 1, "TASK (a task id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	pos, c, ctx := call.pos, call.c, call.ctx
	evs, err := c.TaskEvents(ctx, pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(evs)
	}
	tw := a.table()
	fmt.Fprintln(tw, "TIME\tBY\tEVENT\tSUMMARY")
	for _, e := range evs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", fmtTime(e.OccurredAt), actorName(e.Actor), e.Type, e.Summary)
	}
	tw.Flush()
	fmt.Fprintf(a.stdout, "\n%d events. Retry lineage: taskctl chain %s\n", len(evs), pos[0])
	return exitOK
}

// actorName is "admin Ada Admin", "worker Genesis", "system stuck-detector".
func actorName(a client.Actor) string {
	name := a.Name
	if name == "" {
		name = a.ID
	}
	if name == "" {
		return string(a.Kind)
	}
	return string(a.Kind) + " " + name
}

var chainSpec = cmdSpec{
	name: "chain", args: "TASK [--json]",
	summary: "Show the retry lineage TASK belongs to, original to latest: each attempt's worker, timings,\n" +
		"failure kind and reason, the hint it was given and what was decided after it.",
	example: "taskctl chain 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d",
}

func (a *app) chain(args []string) int {
	spec := chainSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the chain as JSON")
	call, code := a.start(fs, spec, args, api, 1, "TASK (a task id)")
	if call == nil {
		return code
	}
	defer call.cancel()
	pos, c, ctx := call.pos, call.c, call.ctx
	ch, err := c.TaskChain(ctx, pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(ch)
	}
	tw := a.table()
	fmt.Fprintln(tw, "#\tTASK\tSTATUS\tWORKER\tSTARTED\tTOOK\tFAILURE\tHINT\tTHEN")
	for _, at := range ch.Attempts {
		worker := "-"
		if at.Worker != nil {
			worker = at.Worker.Name
			if worker == "" {
				worker = at.Worker.ID
			}
		}
		failure := "-"
		if at.FailureKind != nil {
			failure = *at.FailureKind + ": " + clip(deref(at.FailureReason), 50)
		}
		mark := ""
		if at.TaskID == pos[0] && len(ch.Attempts) > 1 {
			mark = " *"
		}
		fmt.Fprintf(tw, "%d\t%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", at.Attempt, at.TaskID, mark, at.Status, worker,
			fmtTimePtr(at.StartedAt), fmtDuration(at.DurationSeconds), failure, orDash(clip(deref(at.Hint), 40)),
			orDash(deref(at.RetryOutcome)))
	}
	tw.Flush()
	fmt.Fprintf(a.stdout, "\n%d attempts. One attempt's events: taskctl history TASK\n", len(ch.Attempts))
	return exitOK
}
