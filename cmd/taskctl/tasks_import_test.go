package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// taskctl tasks import sends a file's lines in batches: good lines are
// created, each bad one is listed with its line number and error (exit 1),
// progress goes to stderr, and running the same import again creates
// nothing twice. Unique keys dedupe lines within the file.
func TestTasksImport(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	schema := e.writeFile("s.json", `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	e.ok("types", "create", "--name", "crawl", "--schema-file", schema)

	var lines []string
	for i := range 2500 {
		switch i {
		case 7:
			lines = append(lines, `{"title": "broken", "params": {"n": 1}`) // not JSON
		case 1200:
			lines = append(lines, `{"title": "bad params", "params": {"n": "x"}}`)
		case 2400:
			lines = append(lines, `{"title": "", "params": {"n": 1}}`)
		case 2401, 2402:
			lines = append(lines, `{"title": "keyed", "params": {"n": 1}, "unique_key": "once", "on_duplicate": "existing"}`)
		case 10:
			lines = append(lines, "   ") // blank lines are skipped
		default:
			lines = append(lines, fmt.Sprintf(`{"title": "task %d", "params": {"n": %d}}`, i, i))
		}
	}
	file := e.writeFile("tasks.jsonl", strings.Join(lines, "\n")+"\n")
	count := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_tasks`).Scan(&n))
		return n
	}

	code, out, errOut := e.taskctl("tasks", "import", file, "--type", "crawl")
	require.Equal(t, exitFailure, code, out+errOut)
	require.Contains(t, out, "line 8: ")
	require.Contains(t, out, "line 1201: 400 validation_failed: tasks[")
	require.Contains(t, out, ".params.n")
	require.Contains(t, out, "line 2401: 400 validation_failed")
	require.Contains(t, out, "Created 2495 tasks from 2499 lines; 1 already there (their unique key), 3 failed.")
	require.Contains(t, errOut, "2001 lines done: 1999 created, 2 failed", "progress on stderr")
	require.Equal(t, 2495, count())

	// Again: every request is answered from its key; nothing new.
	code, out, _ = e.taskctl("tasks", "import", file, "--type", "crawl", "--json")
	require.Equal(t, exitFailure, code)
	var results []importResult
	require.NoError(t, json.Unmarshal([]byte(out), &results))
	require.Len(t, results, 2499)
	require.Equal(t, 2495, count())

	code, _, errOut = e.taskctl("tasks", "import", file, "--batch", "0")
	require.Equal(t, exitUsage, code, errOut)
	code, _, _ = e.taskctl("tasks", "import", e.writeFile("empty.jsonl", ""))
	require.Equal(t, exitOK, code)
}
