package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// taskctl rules: create with keys, list, show (each key's state), edit,
// keys set, pause, resume, delete; help names the syntax, and bad input
// fails naming the field with nothing changed.
func TestRulesCommands(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("types", "create", "--name", "reddit_crawl")
	out := e.ok("rules", "create", "--name", "watchlist", "--type", "reddit_crawl", "--title", "Reddit crawl for {{key}}",
		"--params", `{"ticker": "{{key}}"}`, "--max-age", "6h", "--keys", "NVDA:5,INTC:1,AMD:2:rising")
	require.Contains(t, out, `Created freshness rule "watchlist"`)
	require.Contains(t, out, "3 keys, max age 6h0m0s")
	require.Contains(t, e.ok("rules", "list"), "watchlist")
	out = e.ok("rules", "show", "watchlist")
	require.Contains(t, out, "urgent ≥ 20, high ≥ 5, medium ≥ 2")
	require.Regexp(t, `AMD\s+2 rising\s+-\s+never`, out)
	out = e.ok("rules", "edit", "watchlist", "--max-age", "12h", "--thresholds", "40,10,3")
	require.Contains(t, out, "max age 12h0m0s")
	keys := e.writeFile("keys.txt", "NVDA:9\nTSLA:3:rising\n")
	require.Contains(t, e.ok("rules", "keys", "set", "watchlist", "--keys-file", keys), "now watches 2 keys")
	out = e.ok("rules", "show", "watchlist")
	require.Contains(t, out, "TSLA")
	require.NotContains(t, out, "INTC")
	require.Contains(t, e.ok("rules", "pause", "watchlist", "--reason", "market closed"), "is paused")
	require.Contains(t, e.ok("rules", "resume", "watchlist"), "is active")

	code, _, errOut := e.taskctl("rules", "create", "--name", "bad", "--type", "reddit_crawl", "--title", "x {{key}}",
		"--params", `{"ticker": "{{key"}`, "--max-age", "6h")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "params_template")
	code, _, errOut = e.taskctl("rules", "create", "--name", "bad", "--type", "reddit_crawl", "--title", "x {{key}}",
		"--params", `{"ticker": "{{key}}"}`, "--max-age", "-6h")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "max_age")
	code, _, errOut = e.taskctl("rules", "keys", "set", "watchlist", "--keys", "NVDA:many")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "whole number")
	require.Contains(t, e.ok("rules", "show", "watchlist"), "TSLA", "nothing changed")
	out = e.ok("rules", "create", "--help")
	require.Contains(t, out, "--keys")
	require.Contains(t, out, "{{key}}")

	require.Contains(t, e.ok("rules", "delete", "watchlist"), `Deleted freshness rule "watchlist"`)
	require.Contains(t, e.ok("rules", "list"), "no freshness rules")
}
