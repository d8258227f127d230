package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// pendingDir holds writers' temporary files, inside the root so that a
// commit is a rename on the same filesystem.
const pendingDir = ".pending"

// FS keeps objects as files under a root directory.
type FS struct {
	root string
}

// NewFS uses dir (created if missing) as the root.
func NewFS(dir string) (*FS, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(abs, pendingDir), 0o750); err != nil {
		return nil, fmt.Errorf("blob: data directory %s: %w", abs, err)
	}
	return &FS{root: abs}, nil
}

// Root is the data directory.
func (s *FS) Root() string { return s.root }

func (s *FS) Kind() string { return "filesystem" }

func (s *FS) path(key string) (string, error) {
	if !ValidKey(key) || key == pendingDir || strings.HasPrefix(key, pendingDir+"/") {
		return "", fmt.Errorf("blob: invalid key %q", key)
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

func (s *FS) Create(_ context.Context, key, _ string) (Writer, error) {
	final, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Join(s.root, pendingDir), "upload-*")
	if err != nil {
		return nil, fmt.Errorf("blob: create: %w", err)
	}
	return &fsWriter{f: f, final: final}, nil
}

type fsWriter struct {
	f     *os.File
	final string
}

func (w *fsWriter) Write(p []byte) (int, error) { return w.f.Write(p) }

// Commit syncs the file before renaming it into place, so an event that
// names the object never outlives its bytes on a crash.
func (w *fsWriter) Commit(context.Context) error {
	tmp := w.f.Name()
	if err := w.f.Sync(); err != nil {
		_ = w.f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("blob: sync: %w", err)
	}
	if err := w.f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("blob: close: %w", err)
	}
	dir := filepath.Dir(w.final)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("blob: mkdir: %w", err)
	}
	if err := os.Rename(tmp, w.final); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("blob: rename: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func (w *fsWriter) Abort(context.Context) error {
	_ = w.f.Close()
	if err := os.Remove(w.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *FS) Open(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return f, err
}

func (s *FS) Stat(_ context.Context, key string) (Info, error) {
	p, err := s.path(key)
	if err != nil {
		return Info{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.IsDir()) {
		return Info{}, ErrNotFound
	}
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Delete removes the file and the directories it leaves empty.
func (s *FS) Delete(_ context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for dir := filepath.Dir(p); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

func (s *FS) List(ctx context.Context, prefix string, fn func(Info) error) error {
	return filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(s.root, p)
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if key == pendingDir {
				return filepath.SkipDir
			}
			// Skip directories that cannot hold a key with the prefix.
			if key != "." && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		return fn(Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
	})
}

func (s *FS) PresignGet(context.Context, string, string, string, time.Duration) (string, error) {
	return "", ErrNoPresign
}

func (s *FS) SweepPending(_ context.Context, olderThan time.Time) (int, error) {
	dir := filepath.Join(s.root, pendingDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(olderThan) {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n, nil
}
