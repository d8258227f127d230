package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/clawdbot/task-service/api/client"
)

var tailSpec = cmdSpec{
	name: "tail", args: "[flags]",
	summary: "Follow the event log live (Server-Sent Events): one readable line per event, or one JSON\n" +
		"object per line with --json. After a disconnect (network, server restart, a client too slow\n" +
		"for the stream) it reconnects with backoff and resumes right after the last event it printed,\n" +
		"so nothing is lost or printed twice. Stop with Ctrl-C.",
	example: "taskctl tail --type task.failed,task.retried --json | jq .summary\n" +
		"taskctl tail --worker genesis@bots.example.com --from-start",
}

func (a *app) tail(args []string) int {
	spec := tailSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "one JSON object per line (for jq and scripts)")
	types := fs.String("type", "", "only these event types, comma-separated (task.failed,task.retried)")
	stream := fs.String("stream", "", "only this stream (a task, worker or type id)")
	worker := fs.String("worker", "", "only events about this worker (id, email or name)")
	after := fs.String("after", "", "start after this position (an event's id); default: from now on")
	fromStart := fs.Bool("from-start", false, "start at the beginning of the log")
	_, code, ok := a.parseArgs(fs, spec, args, 0, "")
	if !ok {
		return code
	}
	if *fromStart && *after != "" {
		return a.fail(spec.name, usagef("give --after or --from-start, not both"))
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	q := client.EventQuery{After: *after, StreamID: *stream}
	if *fromStart {
		q.After = "0"
	}
	for _, t := range strings.Split(*types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			q.Types = append(q.Types, t)
		}
	}
	if *worker != "" {
		w, err := resolveWorker(ctx, c, *worker)
		if err != nil {
			return a.fail(spec.name, err)
		}
		q.WorkerID = w.ID
	}
	enc := json.NewEncoder(a.stdout)
	opts := client.TailOptions{EventQuery: q, OnReconnect: func(err error, after string, delay time.Duration) {
		from := "the live end"
		if after != "" {
			from = "after " + after
		}
		fmt.Fprintf(a.stderr, "taskctl tail: stream stopped (%v); resuming %s in %s\n", err, from, delay.Round(time.Millisecond))
	}}
	err = c.Tail(ctx, opts, func(e client.Event) error {
		if *asJSON {
			return enc.Encode(e)
		}
		_, err := fmt.Fprintln(a.stdout, tailLine(e))
		return err
	})
	if err == nil || errors.Is(err, ctx.Err()) {
		return exitOK
	}
	return a.fail(spec.name, err)
}

// tailLine is one event for people: time, type, stream, who, what.
func tailLine(e client.Event) string {
	return fmt.Sprintf("%s  %-22s %s  %-24s %s", e.OccurredAt.Local().Format("15:04:05.000"), e.Type,
		e.StreamID, clip(actorName(e.Actor), 24), e.Summary)
}
