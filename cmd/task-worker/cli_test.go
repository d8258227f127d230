package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runWorker runs the task-worker binary to its end and returns its exit
// code and output.
func runWorker(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "task-worker"), args...).CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		return exit.ExitCode(), string(out)
	}
	return 0, string(out)
}

// Both spellings of version work, as in task-service and taskctl, and the
// help names every variable a command gets.
func TestVersionSpellingsAndHelp(t *testing.T) {
	t.Parallel()
	for _, spelling := range []string{"version", "--version", "-version"} {
		code, out := runWorker(t, spelling)
		require.Equal(t, 0, code, "task-worker %s: %s", spelling, out)
		require.Regexp(t, `^task-worker version \S+\nrevision `, out, spelling)
	}
	code, out := runWorker(t, "--help")
	require.Equal(t, 0, code, out)
	for _, v := range []string{"TASK_ID", "TASK_RESULT_FILE", "TASK_DIR", "TASK_OUTPUT_DIR", "TASK_TOKEN"} {
		require.Contains(t, out, v)
	}
	code, out = runWorker(t, "version", "extra")
	require.Equal(t, 2, code, out)
}

// A worker that cannot reach the service says when it tries again with a
// unit (not zerolog's bare milliseconds).
func TestRetryDelaysAreLoggedWithAUnit(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, dir: t.TempDir()}
	f.svc = &service{addr: freeAddr(t)} // nothing listens there
	w := f.startWorker("nobody@example.com", nil, "--command", "true")
	var retryIn any
	eventually(t, 10*time.Second, "a retry is logged", func() bool {
		for _, l := range w.logLines() {
			if l["message"] == "cannot reach the service to log in; will retry" {
				retryIn = l["retry_in"]
				return true
			}
		}
		return false
	})
	require.IsType(t, "", retryIn)
	require.Regexp(t, `^[0-9.]+(ms|s)$`, retryIn)
}

// The bash completion script completes the flags, and file names after a
// flag that takes a path; zsh and fish scripts name every flag.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	code, script := runWorker(t, "completion", "bash")
	require.Equal(t, 0, code, script)
	dir := t.TempDir()
	file := filepath.Join(dir, "task-worker.bash")
	require.NoError(t, os.WriteFile(file, []byte(script), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "worker.json"), []byte("{}"), 0o600))
	complete := func(words ...string) string {
		t.Helper()
		cmd := exec.Command("bash", "-c", fmt.Sprintf(`cd %q; source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _task_worker; echo "${COMPREPLY[*]}"`,
			dir, file, strings.Join(words, " "), len(words)-1))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "--config", complete("task-worker", "--con"))
	require.Equal(t, "--password --password-file", complete("task-worker", "--api", "x", "--pass"))
	require.Equal(t, "worker.json", complete("task-worker", "--config", "wor"))
	require.Equal(t, "version", complete("task-worker", "ver"))

	for _, shell := range []string{"zsh", "fish"} {
		code, out := runWorker(t, "completion", shell)
		require.Equal(t, 0, code, out)
		for _, o := range options() {
			require.Contains(t, out, o.flag, shell)
		}
	}
	code, _ = runWorker(t, "completion", "tcsh")
	require.Equal(t, 2, code)
}
