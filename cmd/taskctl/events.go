package main

import (
	"cmp"
	"fmt"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/archive"
)

var eventsCommand = group("events", "The event log's archive (ADR 035), with direct access to the task-data store: the settings\n"+
	"of task-service name it (DATA_DIR, or DATA_S3_BUCKET with DATA_S3_ENDPOINT, DATA_S3_REGION,\n"+
	"DATA_S3_PATH_STYLE and the AWS credential chain).", map[string]subcommand{
	"archive": {"`taskctl events archive verify`: re-read archive objects, check each against its manifest", (*app).eventsArchive},
})

// eventsArchive runs `events archive verify`, the archive's one action.
func (a *app) eventsArchive(args []string) int {
	switch {
	case len(args) > 0 && args[0] == "verify":
		return a.eventsArchiveVerify(args[1:])
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		return a.eventsArchiveVerify([]string{"--help"})
	}
	fmt.Fprintf(a.stderr, "taskctl events archive: say `taskctl events archive verify`; run `taskctl events archive verify --help`\n")
	return exitUsage
}

var eventsArchiveVerifySpec = cmdSpec{
	name: "events archive verify", args: "[PERIOD...] [--event-partition day|week] [--json]",
	summary: "Re-read archive objects of the event log and check each against its manifest: the SHA-256 and size\n" +
		"of the object, and its number of events (each a JSON object of the period). Every object that has a\n" +
		"manifest, or only those of the PERIODs given (2026-11-20, or day/2026-11-20): a period's object and its\n" +
		"supplements (day/2026-11-20.1, ...: events that committed after the period was archived). A mismatch\n" +
		"names the object and what differs, and the exit status is 1. It only reads.",
	example: "DATA_DIR=/var/lib/task-service/data taskctl events archive verify\n" +
		"taskctl events archive verify day/2026-11-20",
}

// archiveCheck is one object's outcome.
type archiveCheck struct {
	Period string `json:"period"`
	Object string `json:"object"`
	Events int64  `json:"events"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Error  string `json:"error,omitempty"`
}

func (a *app) eventsArchiveVerify(args []string) int {
	spec := eventsArchiveVerifySpec
	fs := flagSet(spec)
	kind := fs.String("event-partition", cmp.Or(a.getenv("EVENT_PARTITION"), archive.Day), "the archive's period: day or week (default $EVENT_PARTITION, else day)")
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	pos, code, ok := a.parse(fs, spec, args)
	if !ok {
		return code
	}
	if _, err := archive.ParseKind(*kind); err != nil {
		return a.fail(spec.name, usagef("--event-partition: %v", err))
	}
	var periods []archive.Period
	for _, s := range pos {
		p, err := archive.ParsePeriod(*kind, s)
		if err != nil {
			return a.fail(spec.name, usagef("%v", err))
		}
		periods = append(periods, p)
	}
	ctx, cancel := a.signalContext()
	defer cancel()
	bs, err := a.blobEnv(ctx)
	if err != nil {
		return a.fail(spec.name, err)
	}
	objects, err := archive.List(ctx, bs, *kind)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if len(periods) > 0 {
		// The periods asked for, each with its supplements; a period with
		// no manifest is checked too, so that it is reported missing.
		var asked []archive.Object
		for _, p := range periods {
			n := len(asked)
			for _, o := range objects {
				if o.Period == p {
					asked = append(asked, o)
				}
			}
			if len(asked) == n {
				asked = append(asked, archive.Object{Period: p})
			}
		}
		objects = asked
	}
	var checks []archiveCheck
	bad := 0
	for _, p := range objects {
		m, err := archive.VerifyObject(ctx, bs, p)
		c := archiveCheck{Period: p.String(), Object: p.Key(), Events: m.Events, Bytes: m.Bytes, SHA256: m.SHA256}
		if err != nil {
			c.Error = err.Error()
			bad++
			if !*asJSON {
				fmt.Fprintf(a.stderr, "taskctl %s: %v\n", spec.name, err)
			}
		}
		checks = append(checks, c)
	}
	if *asJSON {
		if code := a.printJSON(checks); code != exitOK {
			return code
		}
	} else {
		tw := a.table()
		fmt.Fprintln(tw, "PERIOD\tEVENTS\tSIZE\tSHA-256\tCHECK")
		for _, c := range checks {
			verdict := "ok"
			if c.Error != "" {
				verdict = "MISMATCH"
			}
			sum := c.SHA256
			if len(sum) > 12 {
				sum = sum[:12] + "…"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", c.Period, c.Events, events.HumanBytes(c.Bytes), sum, verdict)
		}
		tw.Flush()
		switch {
		case len(checks) == 0:
			fmt.Fprintf(a.stdout, "No archive objects of kind %s in the store.\n", *kind)
		case bad == 0:
			fmt.Fprintf(a.stdout, "%d archive objects match their manifests.\n", len(checks))
		default:
			fmt.Fprintf(a.stdout, "%d of %d archive objects do not match their manifests.\n", bad, len(checks))
		}
	}
	if bad > 0 {
		return exitFailure
	}
	return exitOK
}
