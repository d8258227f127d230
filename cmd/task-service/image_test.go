package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// podman runs podman as this machine needs it: runc (crun fails on some
// cgroup modes), the host's network (the test PostgreSQL is on loopback).
func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if args[0] == "run" {
		args = append([]string{"run", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--network", "host"}, args[1:]...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestImage runs the container image that `make test-image` builds
// (scripts/image.sh) against the test PostgreSQL: it migrates, turns ready,
// serves, and drains on SIGTERM; it runs as a user that is not root and
// exposes only the HTTP port.
func TestImage(t *testing.T) {
	image := os.Getenv("TASK_SERVICE_IMAGE")
	if image == "" {
		t.Skip("TASK_SERVICE_IMAGE is not set: `make test-image` builds the image and runs this test")
	}
	ctx := context.Background()

	cfg, err := podman(t, "image", "inspect", "--format", "{{json .Config}}", image)
	require.NoError(t, err, cfg)
	var config struct {
		User         string
		ExposedPorts map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(cfg), &config))
	require.Equal(t, "65532:65532", config.User, "not root")
	require.Len(t, config.ExposedPorts, 1)
	require.Contains(t, config.ExposedPorts, "8001/tcp")
	size, err := podman(t, "image", "inspect", "--format", "{{.Size}}", image)
	require.NoError(t, err)
	bytes, err := strconv.ParseInt(size, 10, 64)
	require.NoError(t, err)
	t.Logf("image %s: %.1f MB", image, float64(bytes)/1e6)

	// Migrations run from the image: the host binary takes the fresh
	// database one step down, the image brings it up again.
	dbURL := storetest.NewDB(t)
	latest, previous := latestMigration(t)
	code, out := runCmd(t, baseEnv("DATABASE_URL="+dbURL), "migrate", "down", "1")
	require.Equal(t, 0, code, out)
	code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL), "migrate", "version")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("version %d dirty=false", previous))
	out, err = podman(t, "run", "--rm", "-e", "DATABASE_URL="+dbURL, image, "migrate", "up")
	require.NoError(t, err, out)
	code, out = runCmd(t, baseEnv("DATABASE_URL="+dbURL), "migrate", "version")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("version %d dirty=false", latest))

	// It serves: ready, a login, a worker's long poll waiting for work.
	addr := freeAddr(t)
	name := fmt.Sprintf("task-service-test-%d", time.Now().UnixNano())
	out, err = podman(t, "run", "-d", "--name", name, "-e", "DATABASE_URL="+dbURL, "-e", "LISTEN_ADDR="+addr,
		"-e", "JWT_SECRET=image-test-secret-0123456789", "-e", "ADMIN_EMAIL=root@example.com",
		"-e", "ADMIN_PASSWORD=root-password", "-e", "BCRYPT_COST=4", image)
	require.NoError(t, err, out)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := podman(t, "logs", name)
			t.Logf("container logs:\n%s", logs)
		}
		_, _ = podman(t, "rm", "-f", name)
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "/readyz never turned ready")
	admin := client.New(base, nil)
	_, err = admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	_, err = admin.CreateWorker(ctx, client.NewWorker{Email: "w@example.com", Password: "worker-password", FullName: "W"})
	require.NoError(t, err)
	w := client.New(base, nil)
	_, err = w.Login(ctx, "w@example.com", "worker-password")
	require.NoError(t, err)
	type claimAnswer struct {
		n   int
		err error
	}
	claimed := make(chan claimAnswer, 1)
	go func() {
		tasks, err := w.ClaimMany(ctx, 1, 50*time.Second)
		claimed <- claimAnswer{len(tasks), err}
	}()
	time.Sleep(500 * time.Millisecond) // the long poll is waiting

	// SIGTERM drains: the waiting long poll is answered (no task), and the
	// process exits 0 well before podman's 30 s would turn to SIGKILL.
	stopped := time.Now()
	out, err = podman(t, "stop", "-t", "30", name)
	require.NoError(t, err, out)
	took := time.Since(stopped)
	select {
	case a := <-claimed:
		require.NoError(t, a.err, "the waiting claim is answered, not cut")
		require.Zero(t, a.n)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting claim was not answered at shutdown")
	}
	exit, err := podman(t, "inspect", "--format", "{{.State.ExitCode}}", name)
	require.NoError(t, err)
	require.Equal(t, "0", exit)
	require.Less(t, took, 10*time.Second)
	logs, err := podman(t, "logs", name)
	require.NoError(t, err)
	require.Contains(t, logs, `"message":"stopped"`)
	t.Logf("SIGTERM to exit: %v", took.Round(time.Millisecond))
}
