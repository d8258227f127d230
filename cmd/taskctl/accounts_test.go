package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkersAccounts drives taskctl workers show|update|deactivate|
// reactivate|password against a real server.
func TestWorkersAccounts(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	e.ok("workers", "create", "--email", "exodus@bots.example.com", "--name", "Exodus", "--password", "exodus-password")

	out := e.ok("workers", "show", "exodus@bots.example.com")
	require.Contains(t, out, "Exodus")
	require.Regexp(t, `Account\s+active`, out)

	out = e.ok("workers", "update", "Exodus", "--max-concurrent", "3", "--name", "Exodus II")
	require.Contains(t, out, "Exodus II")
	require.Contains(t, out, "of 3")
	code, _, errOut := e.taskctl("workers", "update", "exodus@bots.example.com")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "nothing to change")
	code, _, errOut = e.taskctl("workers", "update", "exodus@bots.example.com", "--max-concurrent", "500")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "max_concurrent_tasks")

	out = e.ok("workers", "deactivate", "exodus@bots.example.com", "--reason", "retired")
	require.Contains(t, out, "DEACTIVATED")
	code, _, errOut = e.taskctl("workers", "deactivate", "exodus@bots.example.com")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "already deactivated")
	out = e.ok("workers", "reactivate", "exodus@bots.example.com")
	require.Regexp(t, `Account\s+active`, out)

	out = e.ok("workers", "password", "exodus@bots.example.com", "--password", "a-new-password")
	require.Contains(t, out, "Password of Exodus II")
	code, _, errOut = e.taskctl("workers", "password", "exodus@bots.example.com", "--password", "short")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "password")

	// An admin-only account in one call; listed with --role, shown by email.
	out = e.ok("workers", "create", "--email", "ops@example.com", "--name", "Ops", "--password", "ops-password-1", "--admin", "--worker=false")
	require.Contains(t, out, "Created admin Ops <ops@example.com>")
	require.NotContains(t, e.ok("workers", "list"), "ops@example.com")
	out = e.ok("workers", "list", "--role", "admin")
	require.Regexp(t, `Ops\s+ops@example.com\s+admin\s`, out)
	require.Contains(t, e.ok("workers", "list", "--role", "any"), "exodus@bots.example.com")

	// One page at a time: each page's hint continues after it, and the
	// pages hold every account once.
	more := regexp.MustCompile(`More: taskctl workers list --role any --limit 1 --after (\S+)`)
	var pages []string
	args := []string{"workers", "list", "--role", "any", "--limit", "1"}
	for {
		out := e.ok(args...)
		pages = append(pages, out)
		m := more.FindStringSubmatch(out)
		if m == nil {
			break
		}
		require.Less(t, len(pages), 10, "the pages end")
		args = []string{"workers", "list", "--role", "any", "--limit", "1", "--after", m[1]}
	}
	all := strings.Join(pages, "\n")
	for _, email := range []string{"exodus@bots.example.com", "ops@example.com"} {
		require.Equal(t, 1, strings.Count(all, email), "%s on exactly one page", email)
	}
	code, _, errOut = e.taskctl("workers", "list", "--limit", "0")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "limit")
	code, _, errOut = e.taskctl("workers", "list", "--after", "not-a-cursor")
	require.NotEqual(t, exitOK, code)
	require.Contains(t, errOut, "after")
	require.Contains(t, e.ok("workers", "show", "ops@example.com"), "Ops")

	code, _, errOut = e.taskctl("workers", "show", "nobody@example.com")
	require.Equal(t, exitUsage, code)
	require.True(t, strings.Contains(errOut, "no worker"), errOut)
}
