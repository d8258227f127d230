package api_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A TypeScript client generated from the served document (openapi-typescript,
// openapi-fetch) drives a task's lifecycle against a real server, every
// answer checked against the document too: login, a type, a worker, a 400
// with its field, a task, heartbeat, claim, an empty claim (data null), an
// update, an upload and its download, a result, completion and a 409.
// Node.js and the npm packages come from scripts/tsclient.sh; without npm
// the test skips, except under CI=true.
func TestTypeScriptClientLifecycle(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("npm is not installed (scripts/tsclient.sh installs it under CI=true)")
	}
	b := setup(t)
	cmd := exec.Command("../scripts/tsclient.sh", b.url, adminEmail, adminPassword)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.Contains(string(out), "typescript lifecycle: ok"), "%s", out)
}
