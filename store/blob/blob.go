package blob

import (
	"context"
	"errors"
	"io"
	"path"
	"strings"
	"time"
)

// ErrNotFound: no object at the key.
var ErrNotFound = errors.New("blob: object not found")

// ErrNoPresign: the store cannot hand out URLs (the filesystem); stream the
// object instead.
var ErrNoPresign = errors.New("blob: presigned URLs not supported")

// Info describes a stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store keeps objects by key.
type Store interface {
	// Create starts an object at key. Nothing is visible at key until the
	// Writer's Commit returns nil; Commit replaces an object already there.
	Create(ctx context.Context, key, contentType string) (Writer, error)
	// Open reads an object; ErrNotFound when there is none. The filesystem
	// returns an io.ReadSeekCloser, so callers can serve ranges.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes an object; ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes an object; a missing one is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every committed object whose key starts with prefix.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// PresignGet returns a URL that downloads key for ttl, answered with the
	// given Content-Disposition and Content-Type (whatever the object was
	// stored with); ErrNoPresign on the filesystem.
	PresignGet(ctx context.Context, key, disposition, contentType string, ttl time.Duration) (string, error)
	// SweepPending removes uncommitted data (a crashed writer's temporary
	// file or multipart upload) started before olderThan, and counts it.
	SweepPending(ctx context.Context, olderThan time.Time) (int, error)
	// Kind is "filesystem" or "s3", for logs and metrics.
	Kind() string
}

// Writer receives an object's bytes. Exactly one of Commit or Abort ends it.
type Writer interface {
	io.Writer
	// Commit makes the object visible at its key, complete.
	Commit(ctx context.Context) error
	// Abort throws the bytes away; nothing becomes visible.
	Abort(ctx context.Context) error
}

// ValidKey reports whether key is a clean relative slash path: no empty,
// "." or ".." segment, no leading slash, no backslash or NUL.
func ValidKey(key string) bool {
	if key == "" || strings.ContainsAny(key, "\\\x00") || path.Clean(key) != key || strings.HasPrefix(key, "/") {
		return false
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// Config chooses the store: S3 when S3.Bucket is set, else the filesystem
// under Dir.
type Config struct {
	Dir string
	S3  S3Config
}

// Open builds the configured store.
func Open(ctx context.Context, cfg Config) (Store, error) {
	if cfg.S3.Bucket != "" {
		return NewS3(ctx, cfg.S3)
	}
	if cfg.Dir == "" {
		return nil, errors.New("blob: no data directory and no S3 bucket configured")
	}
	return NewFS(cfg.Dir)
}
