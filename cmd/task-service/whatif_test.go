package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
	"github.com/clawdbot/task-service/store/whatif"
)

// A chain the running service's retry reactor exhausted is reported as
// retried by taskctl replay --what-if with one more retry, and by the API;
// a bad policy file is refused naming the field.
func TestWhatIfThroughTheBinaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL)
	admin := s.rootAdmin(t)
	zero := 0
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: "flaky", Label: "Flaky", SOP: "Try.", MaxRetries: &zero})
	require.NoError(t, err)
	_, err = admin.CreateWorker(ctx, client.NewWorker{Email: "w@example.com", Password: "worker-password", FullName: "W", MaxConcurrentTasks: 1})
	require.NoError(t, err)
	w := client.New(s.base, nil)
	_, err = w.Login(ctx, "w@example.com", "worker-password")
	require.NoError(t, err)
	task, err := admin.CreateTask(ctx, client.NewTask{Title: "Try once", TaskTypeID: tt.ID, Priority: "high", Params: json.RawMessage(`{}`)})
	require.NoError(t, err)
	claimed, err := w.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, claimed.ID)
	_, err = w.Fail(ctx, task.ID, "tests failed")
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := admin.Task(ctx, task.ID)
		require.NoError(t, err)
		if d.RetryOutcome != nil {
			require.Equal(t, "exhausted", *d.RetryOutcome)
			break
		}
		require.False(t, time.Now().After(deadline), "the retry reactor did not decide")
		time.Sleep(20 * time.Millisecond)
	}

	dir := t.TempDir()
	good, bad := filepath.Join(dir, "policy.json"), filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"types": {"flaky": {"max_retries": 1}}}`), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte(`{"types": {"flaky": {"max_retries": -1}}}`), 0o600))
	taskctl := buildBinary(t, "taskctl")
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(taskctl, append([]string{"replay"}, args...)...)
		cmd.Env = baseEnv("DATABASE_URL=" + dbURL)
		var stdout, stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := run("--what-if", good, "--since", "1d", "--json")
	require.NoError(t, err, errOut)
	var rep whatif.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, int64(1), rep.Totals.Retried)
	require.Len(t, rep.Sample, 1)
	require.Equal(t, task.ID, rep.Sample[0].RootTaskID)

	out, _, err = run("--what-if", good, "--since", "1d")
	require.NoError(t, err)
	require.Contains(t, out, task.ID+"  flaky  exhausted -> unknown  retried,outcome")

	_, errOut, err = run("--what-if", bad, "--since", "1d")
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v", err)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, errOut, "types.flaky.max_retries")

	var api whatif.Report
	require.NoError(t, admin.Do(ctx, http.MethodGet, "/api/v1/admin/replay/what-if?"+url.Values{
		"since": {"1d"}, "policy": {`{"types": {"flaky": {"max_retries": 1}}}`}}.Encode(), nil, &api))
	require.Equal(t, rep.Totals.Retried, api.Totals.Retried)
	require.Equal(t, rep.Sample[0].RootTaskID, api.Sample[0].RootTaskID)
}
