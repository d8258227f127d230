// Package s3test starts a real S3-compatible server (versitygw, built by
// scripts/s3dev.sh) for tests: one per test binary, on a free port, with
// its data in a temporary directory.
package s3test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/clawdbot/task-service/store/blob"
)

const (
	accessKey = "s3test-access-key"
	secretKey = "s3test-secret-key-0123456789"
)

// Server is a running versitygw.
type Server struct {
	Endpoint string
	cmd      *exec.Cmd
	dir      string
	mu       sync.Mutex
	buckets  int
}

var (
	once    sync.Once
	shared  *Server
	starErr error
)

// Shared returns the test binary's server, starting it on first use. It is
// never stopped explicitly: it dies with the test binary (Pdeathsig).
func Shared(t testing.TB) *Server {
	t.Helper()
	once.Do(func() { shared, starErr = start() })
	if starErr != nil {
		t.Fatalf("s3test: %v", starErr)
	}
	return shared
}

// Binary builds (once) and returns the versitygw binary through scripts/s3dev.sh.
func Binary() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "s3dev.sh"), "binary")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/s3dev.sh binary: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "s3test-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(bin, "--port", addr, "--access", accessKey, "--secret", secretKey, "--quiet", "posix", dir)
	// Dies with the test binary even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, _ := os.Create(filepath.Join(dir, "..", filepath.Base(dir)+".log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("versitygw did not listen on %s within 15s (log: %s)", addr, logf.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Server{Endpoint: "http://" + addr, cmd: cmd, dir: dir}, nil
}

// Stop ends the shared server, if one started; call it from TestMain.
func Stop() {
	if shared != nil {
		_ = shared.cmd.Process.Kill()
		_ = shared.cmd.Wait()
		_ = os.RemoveAll(shared.dir)
	}
}

// Config creates a fresh bucket and returns the configuration that reaches it.
func (s *Server) Config(t testing.TB) blob.S3Config {
	t.Helper()
	s.mu.Lock()
	s.buckets++
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), s.buckets)
	s.mu.Unlock()
	cfg := blob.S3Config{Bucket: name, Endpoint: s.Endpoint, Region: "us-east-1", PathStyle: true,
		AccessKey: accessKey, SecretKey: secretKey}
	// The POSIX backend keeps a bucket as a directory; creating it through
	// the API sets the owner attributes it wants.
	client, err := blob.NewS3Client(context.Background(), cfg)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	if _, err := client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return cfg
}

// Store creates a fresh bucket and returns a store on it.
func (s *Server) Store(t testing.TB) *blob.S3 {
	t.Helper()
	st, err := blob.NewS3(context.Background(), s.Config(t))
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return st
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "s3dev.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("scripts/s3dev.sh not found above the working directory")
		}
		dir = parent
	}
}
