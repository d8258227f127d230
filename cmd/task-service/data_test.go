package main_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/blob/s3test"
	"github.com/clawdbot/task-service/store/storetest"
)

// dataEnv is the environment that points the binary at a store: a data
// directory, or a fresh bucket on the test's S3 server.
func dataEnv(t *testing.T, backend string) ([]string, blob.Store) {
	t.Helper()
	if backend == "filesystem" {
		dir := t.TempDir()
		bs, err := blob.NewFS(dir)
		require.NoError(t, err)
		return []string{"DATA_DIR=" + dir}, bs
	}
	srv := s3test.Shared(t)
	cfg := srv.Config(t)
	bs, err := blob.NewS3(context.Background(), cfg)
	require.NoError(t, err)
	return []string{"DATA_S3_BUCKET=" + cfg.Bucket, "DATA_S3_ENDPOINT=" + cfg.Endpoint, "DATA_S3_PATH_STYLE=true",
		"AWS_ACCESS_KEY_ID=" + cfg.AccessKey, "AWS_SECRET_ACCESS_KEY=" + cfg.SecretKey, "AWS_EC2_METADATA_DISABLED=true"}, bs
}

// dataTask makes a worker holding a fresh task on server s.
func dataTask(t *testing.T, s *server) (*client.Client, string) {
	t.Helper()
	ctx := context.Background()
	admin := client.New(s.base, nil)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	email := fmt.Sprintf("uploader-%d@example.com", time.Now().UnixNano())
	w, err := admin.CreateWorker(ctx, client.NewWorker{Email: email, Password: "uploader-password", FullName: "Uploader", MaxConcurrentTasks: 1})
	require.NoError(t, err)
	tt, err := admin.CreateTaskType(ctx, client.NewTaskType{Name: fmt.Sprintf("crawl_%d", time.Now().UnixNano()), Label: "Crawl"})
	require.NoError(t, err)
	task, err := admin.CreateTask(ctx, client.NewTask{Title: "crawl", TaskTypeID: tt.ID, AssignedTo: w.ID})
	require.NoError(t, err)
	wc := client.New(s.base, nil)
	_, err = wc.Login(ctx, email, "uploader-password")
	require.NoError(t, err)
	_, err = wc.Claim(ctx)
	require.NoError(t, err)
	return wc, task.ID
}

// pattern yields n bytes: a random 1 MiB block repeated (cheap to make,
// not compressible within a part).
type pattern struct {
	block []byte
	left  int64
	read  atomic.Int64
}

func newPattern(n int64) *pattern {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i*7919 + i>>8)
	}
	return &pattern{block: b, left: n}
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	off := int(p.read.Load() % int64(len(p.block)))
	n := copy(b, p.block[off:])
	if int64(n) > p.left {
		n = int(p.left)
	}
	p.left -= int64(n)
	p.read.Add(int64(n))
	return n, nil
}

// TestUploadSurvivesNothingOfAKilledService: kill -9 of the service in the
// middle of an upload leaves no event and no visible object; the sweep of
// the restarted service removes what was pending.
func TestUploadKilledWithTheService(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"filesystem", "s3"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			env, bs := dataEnv(t, backend)
			dbURL := storetest.NewDB(t)
			env = append(env, "DATA_SWEEP_GRACE=1ms")
			s := startServer(t, dbURL, env...)
			wc, taskID := dataTask(t, s)

			body := newPattern(200 << 20)
			errc := make(chan error, 1)
			go func() {
				_, err := wc.UploadData(context.Background(), taskID, "posts", "big.jsonl", "", body, -1)
				errc <- err
			}()
			require.Eventually(t, func() bool { return body.read.Load() > 20<<20 }, 30*time.Second, 10*time.Millisecond)
			require.NoError(t, s.cmd.Process.Kill())
			<-s.done
			require.Error(t, <-errc)

			objects := func() []string {
				var keys []string
				require.NoError(t, bs.List(context.Background(), "", func(i blob.Info) error { keys = append(keys, i.Key); return nil }))
				return keys
			}
			require.Empty(t, objects(), "nothing visible")
			conn, err := pgx.Connect(context.Background(), dbURL)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var n int
			require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM task_events WHERE type = 'task.data_uploaded'`).Scan(&n))
			require.Zero(t, n, "no event")

			// The restarted service sweeps at start (grace 1 ms here).
			s2 := startServer(t, dbURL, env...)
			require.Eventually(t, func() bool {
				return strings.Contains(s2.logs.String(), "task data sweep removed") || pendingGone(t, bs)
			}, 20*time.Second, 50*time.Millisecond)
			require.Eventually(t, func() bool { return pendingGone(t, bs) }, 20*time.Second, 50*time.Millisecond)
			require.Empty(t, objects())
		})
	}
}

// pendingGone: nothing is pending (a second sweep with no grace finds nothing).
func pendingGone(t *testing.T, bs blob.Store) bool {
	n, err := bs.SweepPending(context.Background(), time.Now().Add(-time.Hour))
	require.NoError(t, err)
	if n != 0 {
		return false
	}
	switch s := bs.(type) {
	case *blob.FS:
		entries, err := os.ReadDir(filepath.Join(s.Root(), ".pending"))
		return err == nil && len(entries) == 0
	}
	return true
}

// TestUploadMemoryAndThroughput (DATA_BENCH=1; make bench-data): a large
// upload (DATA_BENCH_BYTES, default 2 GiB) through the real binary on each
// store, the service's resident memory sampled all along, next to a direct
// copy of the same bytes (cp on the filesystem; one PutObject with the
// service's own client on S3).
func TestUploadMemoryAndThroughput(t *testing.T) {
	if os.Getenv("DATA_BENCH") == "" {
		t.Skip("set DATA_BENCH=1 (make bench-data)")
	}
	size := int64(2 << 30)
	if v := os.Getenv("DATA_BENCH_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		size = n
	}
	for _, backend := range []string{"filesystem", "s3"} {
		t.Run(backend, func(t *testing.T) {
			env, bs := dataEnv(t, backend)
			dbURL := storetest.NewDB(t)
			env = append(env, "DATA_MAX_BYTES="+strconv.FormatInt(size, 10), "DATA_MAX_TASK_BYTES="+strconv.FormatInt(size*2, 10))
			s := startServer(t, dbURL, env...)
			wc, taskID := dataTask(t, s)

			src := filepath.Join(t.TempDir(), "src.bin")
			f, err := os.Create(src)
			require.NoError(t, err)
			_, err = io.Copy(f, newPattern(size))
			require.NoError(t, err)
			require.NoError(t, f.Close())

			pid := s.cmd.Process.Pid
			base := rss(t, pid)
			var peak atomic.Int64
			peak.Store(base)
			stop := make(chan struct{})
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
						if r := rss(t, pid); r > peak.Load() {
							peak.Store(r)
						}
					}
				}
			}()
			in, err := os.Open(src)
			require.NoError(t, err)
			start := time.Now()
			d, err := wc.UploadData(context.Background(), taskID, "raw", "big.bin", "", in, size)
			took := time.Since(start)
			in.Close()
			close(stop)
			require.NoError(t, err)
			require.Equal(t, size, d.Size)
			growth := peak.Load() - base

			var direct time.Duration
			var directHow string
			switch st := bs.(type) {
			case *blob.FS:
				dst := filepath.Join(st.Root(), "cp-copy.bin")
				start := time.Now()
				out, err := exec.Command("cp", src, dst).CombinedOutput()
				require.NoError(t, err, string(out))
				require.NoError(t, exec.Command("sync", dst).Run())
				direct, directHow = time.Since(start), "cp + sync"
			case *blob.S3:
				in, err := os.Open(src)
				require.NoError(t, err)
				start := time.Now()
				w, err := st.Create(context.Background(), "direct/big.bin", "")
				require.NoError(t, err)
				_, err = io.Copy(w, in)
				require.NoError(t, err)
				require.NoError(t, w.Commit(context.Background()))
				in.Close()
				direct, directHow = time.Since(start), "blob.S3 writer alone (multipart, same client)"
				// And one PutObject of the whole file with the same client.
				in, err = os.Open(src)
				require.NoError(t, err)
				start = time.Now()
				_, err = st.Client().PutObject(context.Background(), s3PutInput{Bucket: st.Bucket(), Key: "direct/put.bin", Body: in, Size: size}.input())
				in.Close()
				require.NoError(t, err)
				put := time.Since(start)
				t.Logf("s3: one PutObject of %d MiB: %.1f MB/s", size>>20, mbps(size, put))
			}
			t.Logf("%s: upload of %d MiB through task-service: %.1f MB/s (%s); %s: %.1f MB/s; service RSS %d MB before, peak %d MB, growth %d MB",
				backend, size>>20, mbps(size, took), took.Round(time.Millisecond), directHow, mbps(size, direct),
				base>>20, peak.Load()>>20, growth>>20)
			require.Less(t, growth, int64(64<<20), "the service's resident memory grew by 64 MB or more")
			_ = events.HumanBytes
		})
	}
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

// rss reads a process's resident set size in bytes.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

type s3PutInput struct {
	Bucket, Key string
	Body        io.Reader
	Size        int64
}

func (p s3PutInput) input() *s3.PutObjectInput {
	return &s3.PutObjectInput{Bucket: &p.Bucket, Key: &p.Key, Body: p.Body, ContentLength: &p.Size}
}
