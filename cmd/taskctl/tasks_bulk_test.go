package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// taskctl tasks cancel/retry --all-matching show the count first, refuse
// without --yes when nobody can answer, then act on every match (more than
// one request's worth) with progress on stderr, and leave the rest alone.
func TestTasksActOnAllMatching(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	schema := e.writeFile("s.json", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	e.ok("types", "create", "--name", "crawl", "--schema-file", schema)
	e.ok("types", "create", "--name", "report", "--schema-file", schema)
	var lines []string
	for i := range 1400 {
		ticker := "NVDA"
		if i%4 == 0 {
			ticker = "AMD"
		}
		lines = append(lines, fmt.Sprintf(`{"title": "crawl %s %d", "params": {"n": %d}}`, ticker, i, i))
	}
	e.ok("tasks", "import", e.writeFile("crawl.jsonl", strings.Join(lines, "\n")), "--type", "crawl")
	e.ok("tasks", "import", e.writeFile("report.jsonl", `{"title": "report NVDA", "params": {"n": 1}}`), "--type", "report")
	count := func(sql string) int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(), sql).Scan(&n))
		return n
	}
	cancelled := func() int {
		return count(`SELECT count(*) FROM task_events WHERE type = 'task.cancelled'`)
	}

	// The list shows what the filter matches, with the same flags.
	require.Contains(t, e.ok("tasks", "list", "--type", "crawl", "--search", "nvda", "--limit", "5"), "crawl NVDA 1399")
	require.Contains(t, e.ok("tasks", "list", "--stuck"), "(no tasks)")

	// Standard input is not a terminal and there is no --yes: the count
	// is shown, nothing changes.
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut)
	a.stdin = strings.NewReader("y\n")
	code := a.tasksCancel([]string{"--all-matching", "--type", "crawl", "--search", "nvda", "--reason", "delisted"})
	require.Equal(t, exitUsage, code, out.String()+errOut.String())
	require.Contains(t, errOut.String(), `1050 tasks matching type="crawl" search="nvda" would be cancelled.`)
	require.Contains(t, errOut.String(), "pass --yes")
	require.Zero(t, cancelled())

	code, _, stderr := e.taskctl("tasks", "cancel", "--all-matching", "--type", "crawl", "--yes")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--reason is required with --all-matching")
	code, _, stderr = e.taskctl("tasks", "cancel", "--all-matching", "--reason", "everything", "--yes")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "needs at least one filter flag")
	code, _, stderr = e.taskctl("tasks", "cancel", "--all-matching", "--status", "stalled", "--reason", "x", "--yes")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "filter.status")
	require.Zero(t, cancelled())

	code, stdout, stderr := e.taskctl("tasks", "cancel", "--all-matching", "--type", "crawl", "--search", "nvda", "--reason", "delisted", "--yes")
	require.Equal(t, exitOK, code, stdout+stderr)
	require.Contains(t, stdout, "Cancelled 1050 tasks; skipped 0")
	// More than one request (at most 1,000 tasks or 20 s each), a progress
	// line after each.
	require.GreaterOrEqual(t, strings.Count(stderr, " of 1050 (skipped 0)"), 2, stderr)
	require.Contains(t, stderr, "cancelled 1050 of 1050 (skipped 0)")
	require.Equal(t, 1050, cancelled())
	require.Equal(t, 1050, count(`SELECT count(*) FROM task_events WHERE type = 'task.cancelled' AND data->>'reason' = 'delisted'`))
	require.Equal(t, 351, count(`SELECT count(*) FROM worker_tasks WHERE status = 'pending'`), "the AMD crawls and the report are left")
	require.Contains(t, e.ok("tasks", "cancel", "--all-matching", "--type", "crawl", "--search", "nvda", "--reason", "again"),
		"nothing to do")

	// Retry: only the failed tasks without a retry.
	out0 := e.ok("workers", "create", "--email", "w@bots.example.com", "--name", "W", "--max-concurrent", "5")
	password := strings.TrimSpace(out0[strings.Index(out0, "Password (shown once): ")+len("Password (shown once): "):])
	w := client.New(e.ts.URL, nil)
	_, err := w.Login(context.Background(), "w@bots.example.com", password)
	require.NoError(t, err)
	for range 3 {
		got, err := w.Claim(context.Background())
		require.NoError(t, err)
		_, err = w.Fail(context.Background(), got.ID, "HTTP 429")
		require.NoError(t, err)
	}
	code, stdout, stderr = e.taskctl("tasks", "retry", "--all-matching", "--status", "failed", "--hint", "slower please", "--yes", "--json")
	require.Equal(t, exitOK, code, stdout+stderr)
	require.Contains(t, stderr, "3 tasks matching status=\"failed\" would be retried.")
	require.Contains(t, stdout, `"done": 3`)
	require.Equal(t, 3, count(`SELECT count(*) FROM worker_tasks WHERE retry_count = 1 AND description LIKE '%slower please%'`))

	// One task, as before; filter flags without --all-matching are refused.
	code, _, stderr = e.taskctl("tasks", "cancel", "--status", "pending", "--reason", "x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "go with --all-matching")
	require.Contains(t, e.ok("tasks", "cancel", "--help"), "--all-matching")
}
