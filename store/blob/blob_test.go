package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/blob/s3test"
)

func TestMain(m *testing.M) {
	code := m.Run()
	s3test.Stop()
	os.Exit(code)
}

// The one suite every store passes.
func TestFS(t *testing.T) {
	t.Parallel()
	suite(t, func(t *testing.T) blob.Store {
		s, err := blob.NewFS(t.TempDir())
		require.NoError(t, err)
		return s
	})
}

func TestS3(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	suite(t, func(t *testing.T) blob.Store {
		cfg := srv.Config(t)
		cfg.PartSize = 5 << 20 // the minimum, so a 12 MiB object takes three parts
		s, err := blob.NewS3(context.Background(), cfg)
		require.NoError(t, err)
		return s
	})
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func put(t *testing.T, s blob.Store, key string, data []byte) {
	t.Helper()
	w, err := s.Create(context.Background(), key, "application/octet-stream")
	require.NoError(t, err)
	// Odd-sized writes, as an HTTP body arrives.
	for r := bytes.NewReader(data); r.Len() > 0; {
		chunk := make([]byte, 100_000)
		n, _ := r.Read(chunk)
		_, err := w.Write(chunk[:n])
		require.NoError(t, err)
	}
	require.NoError(t, w.Commit(context.Background()))
}

func read(t *testing.T, s blob.Store, key string) []byte {
	t.Helper()
	rc, err := s.Open(context.Background(), key)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

func keys(t *testing.T, s blob.Store, prefix string) []string {
	var out []string
	require.NoError(t, s.List(context.Background(), prefix, func(i blob.Info) error {
		out = append(out, i.Key)
		return nil
	}))
	sort.Strings(out)
	return out
}

func suite(t *testing.T, newStore func(t *testing.T) blob.Store) {
	ctx := context.Background()
	for _, size := range []int{0, 1, 5<<20 - 1, 12 << 20} {
		t.Run("round trip "+strconv.Itoa(size), func(t *testing.T) {
			s := newStore(t)
			data := randomBytes(t, size)
			put(t, s, "worker-data/a/posts/x.bin", data)
			require.Equal(t, data, read(t, s, "worker-data/a/posts/x.bin"))
			info, err := s.Stat(ctx, "worker-data/a/posts/x.bin")
			require.NoError(t, err)
			require.EqualValues(t, size, info.Size)
		})
	}

	t.Run("nothing visible before commit, nothing after abort", func(t *testing.T) {
		s := newStore(t)
		w, err := s.Create(ctx, "worker-data/a/posts/big.bin", "")
		require.NoError(t, err)
		_, err = w.Write(randomBytes(t, 11<<20)) // past one part on S3
		require.NoError(t, err)
		_, err = s.Stat(ctx, "worker-data/a/posts/big.bin")
		require.ErrorIs(t, err, blob.ErrNotFound)
		require.Empty(t, keys(t, s, ""))
		require.NoError(t, w.Abort(ctx))
		_, err = s.Open(ctx, "worker-data/a/posts/big.bin")
		require.ErrorIs(t, err, blob.ErrNotFound)
		require.Empty(t, keys(t, s, ""))
		n, err := s.SweepPending(ctx, time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.Zero(t, n, "abort left nothing pending")
	})

	t.Run("a crashed writer is swept", func(t *testing.T) {
		s := newStore(t)
		w, err := s.Create(ctx, "worker-data/a/posts/crash.bin", "")
		require.NoError(t, err)
		_, err = w.Write(randomBytes(t, 11<<20))
		require.NoError(t, err)
		// No Commit, no Abort: the process "died". Not yet old: kept.
		n, err := s.SweepPending(ctx, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = s.SweepPending(ctx, time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, keys(t, s, ""))
	})

	t.Run("commit replaces", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "k/one", []byte("first"))
		put(t, s, "k/one", []byte("second"))
		require.Equal(t, []byte("second"), read(t, s, "k/one"))
	})

	t.Run("list by prefix, delete", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "worker-data/t1/posts/a.jsonl", []byte("a"))
		put(t, s, "worker-data/t1/raw/b.html", []byte("b"))
		put(t, s, "worker-data/t2/posts/c.jsonl", []byte("c"))
		require.Equal(t, []string{"worker-data/t1/posts/a.jsonl", "worker-data/t1/raw/b.html"}, keys(t, s, "worker-data/t1/"))
		require.Len(t, keys(t, s, ""), 3)
		require.NoError(t, s.Delete(ctx, "worker-data/t1/posts/a.jsonl"))
		require.NoError(t, s.Delete(ctx, "worker-data/t1/posts/a.jsonl"), "deleting twice is fine")
		require.Equal(t, []string{"worker-data/t1/raw/b.html"}, keys(t, s, "worker-data/t1/"))
		_, err := s.Stat(ctx, "worker-data/t1/posts/a.jsonl")
		require.ErrorIs(t, err, blob.ErrNotFound)
	})

	t.Run("bad keys are refused", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"", "/abs", "../up", "a/../b", "a//b", "a/./b", "a/"} {
			_, err := s.Create(ctx, k, "")
			require.Error(t, err, k)
		}
	})

	t.Run("presigned download", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "k/file.txt", []byte("hello"))
		url, err := s.PresignGet(ctx, "k/file.txt", `attachment; filename="file.txt"`, "application/octet-stream", time.Minute)
		if s.Kind() == "filesystem" {
			require.ErrorIs(t, err, blob.ErrNoPresign)
			return
		}
		require.NoError(t, err)
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "hello", string(body))
		require.Contains(t, resp.Header.Get("Content-Disposition"), "file.txt")
		require.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	})

	t.Run("filesystem opens seekable", func(t *testing.T) {
		s := newStore(t)
		if s.Kind() != "filesystem" {
			t.Skip("streaming with ranges is the filesystem's way; S3 redirects")
		}
		put(t, s, "k/f", []byte("0123456789"))
		rc, err := s.Open(ctx, "k/f")
		require.NoError(t, err)
		defer rc.Close()
		rs, ok := rc.(io.ReadSeeker)
		require.True(t, ok)
		_, err = rs.Seek(5, io.SeekStart)
		require.NoError(t, err)
		rest, _ := io.ReadAll(rs)
		require.Equal(t, "56789", string(rest))
	})

	t.Run("missing", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Stat(ctx, "no/such")
		require.True(t, errors.Is(err, blob.ErrNotFound))
	})
}
