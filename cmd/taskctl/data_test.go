package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
)

// tasks data lists and downloads (hash-checked); data verify finds a
// corrupted object; data prune deletes with events; data sweep removes an
// orphan.
func TestDataCommands(t *testing.T) {
	e := newCLIEnv(t)
	e.login()
	ctx := context.Background()
	admin := client.New(e.ts.URL, nil)
	_, err := admin.Login(ctx, testAdmin, testPassword)
	require.NoError(t, err)
	w, err := admin.CreateWorker(ctx, client.NewWorker{Email: "crawler@example.com", Password: "crawler-password", FullName: "Crawler", MaxConcurrentTasks: 1})
	require.NoError(t, err)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", Label: "Crawl"})
	require.NoError(t, err)
	task, err := admin.CreateTask(ctx, client.NewTask{Title: "crawl NVDA", TaskTypeID: tt.ID, AssignedTo: w.ID})
	require.NoError(t, err)
	wc := client.New(e.ts.URL, nil)
	_, err = wc.Login(ctx, "crawler@example.com", "crawler-password")
	require.NoError(t, err)
	_, err = wc.Claim(ctx)
	require.NoError(t, err)
	_, err = wc.UploadData(ctx, task.ID, "posts", "nvda.jsonl", "", strings.NewReader("{\"id\":1}\n"), -1)
	require.NoError(t, err)
	_, err = wc.UploadData(ctx, task.ID, "output", "summary.txt", "", strings.NewReader("1 post"), -1)
	require.NoError(t, err)
	_, err = wc.Complete(ctx, task.ID)
	require.NoError(t, err)

	out := e.ok("tasks", "data", task.ID)
	require.Contains(t, out, "nvda.jsonl")
	require.Contains(t, out, "2 files, 15 B")
	dir := t.TempDir()
	e.ok("tasks", "data", task.ID, "--download", dir)
	got, err := os.ReadFile(filepath.Join(dir, "posts", "nvda.jsonl"))
	require.NoError(t, err)
	require.Equal(t, "{\"id\":1}\n", string(got))

	require.Contains(t, e.ok("data", "verify", "--hash", "--database-url", e.dbURL), "2 objects, 15 B: 0 problems")
	// Same size, other bytes: only --hash sees it.
	obj := filepath.Join(os.Getenv("DATA_DIR"), "worker-data", task.ID, "output", "summary.txt")
	require.NoError(t, os.WriteFile(obj, []byte("2 post"), 0o600))
	require.Contains(t, e.ok("data", "verify", "--database-url", e.dbURL), "0 problems")
	code, out, _ := e.taskctl("data", "verify", "--hash", "--database-url", e.dbURL)
	require.Equal(t, exitFailure, code)
	require.Contains(t, out, "SHA-256")

	// An orphan (an object no event names), old enough, is swept.
	orphan := filepath.Join(os.Getenv("DATA_DIR"), "worker-data", task.ID, "posts", "orphan.jsonl")
	require.NoError(t, os.WriteFile(orphan, []byte("x"), 0o600))
	require.Contains(t, e.ok("data", "sweep", "--older-than", "0s", "--database-url", e.dbURL), "removed 1 orphans")
	_, err = os.Stat(orphan)
	require.True(t, os.IsNotExist(err))

	require.Contains(t, e.ok("data", "prune", "--database-url", e.dbURL), "forever")
	require.Contains(t, e.ok("data", "prune", "--retention", "1ns", "--dry-run", "--database-url", e.dbURL), "Would delete 2 objects")
	require.Contains(t, e.ok("data", "prune", "--retention", "1ns", "--database-url", e.dbURL), "Deleted 2 objects")
	require.Contains(t, e.ok("tasks", "data", task.ID), "No data")
	require.Contains(t, e.ok("history", task.ID), "data deleted")
	require.Contains(t, e.ok("replay", "--verify", "--database-url", e.dbURL), "No differences")
}
