package main

import (
	"fmt"
	"time"
)

var digestSpec = cmdSpec{
	name: "digest", args: "--preview [--json]",
	summary: "Print today's daily digest as the Telegram chat gets it: the day up to the digest's time\n" +
		"(DIGEST_AT in DIGEST_TZ on the server), or so far when that time has not come yet.\n" +
		"The server sends it by itself; this only shows it.",
	example: "taskctl digest --preview",
}

func (a *app) digest(args []string) int {
	spec := digestSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	preview := fs.Bool("preview", false, "print today's digest (required: the server sends the digest itself)")
	asJSON := fs.Bool("json", false, "print the preview as JSON (html, text, period)")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	if !*preview {
		fmt.Fprintf(a.stderr, "taskctl digest: say --preview (the server sends the digest at DIGEST_AT by itself; this command shows today's)\n\n")
		a.printUsage(a.stderr, fs, spec)
		return exitUsage
	}
	d, err := call.c.PreviewDigest(call.ctx)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(d)
	}
	fmt.Fprintln(a.stdout, d.Text)
	when := "sent at " + d.DueAt.Local().Format(time.DateTime)
	if d.Partial {
		when = "so far; it goes out at " + d.DueAt.Local().Format(time.DateTime)
	}
	fmt.Fprintf(a.stderr, "\n(the digest of %s, %s)\n", d.Day, when)
	return exitOK
}
