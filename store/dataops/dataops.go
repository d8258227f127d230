// Package dataops keeps the task data index (task_data, folded from the
// task.data_* events) and the blob store in agreement: the orphan sweep,
// the retention prune and the verification of every indexed object.
//
// It is the only code besides the upload path that touches both, and the
// prune is the only code that deletes indexed objects: always after the
// task.data_deleted event exists, so the log never names a deleted object
// as present (a crash in between leaves an orphan for the sweep).
package dataops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
)

// Prefix is where task data lives in the store (events.DataKey).
const Prefix = "worker-data/"

// SweepReport counts what a sweep removed.
type SweepReport struct {
	Pending  int      `json:"pending"`  // temporary files or multipart uploads of dead writers
	Orphans  int      `json:"orphans"`  // complete objects no event names
	Scanned  int      `json:"scanned"`  // objects looked at
	Removed  []string `json:"removed"`  // the orphans' keys
	Failures int      `json:"failures"` // deletions that failed (logged by the caller)
}

// Sweep removes what uploads left behind when they died: pending data
// started before olderThan, and complete objects older than it that no
// task_data row names (an upload whose event never committed, a prune
// interrupted after its event). olderThan keeps uploads in flight safe:
// their objects are younger. Idempotent; instances may sweep at once.
func Sweep(ctx context.Context, db *store.DB, bs blob.Store, olderThan time.Time) (*SweepReport, error) {
	rep := &SweepReport{Removed: []string{}}
	n, err := bs.SweepPending(ctx, olderThan)
	rep.Pending = n
	if err != nil {
		return rep, err
	}
	var batch []blob.Info
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		keys := make([]string, len(batch))
		for i, b := range batch {
			keys[i] = b.Key
		}
		indexed, err := db.IndexedKeys(ctx, keys)
		if err != nil {
			return err
		}
		for _, b := range batch {
			if indexed[b.Key] {
				continue
			}
			if err := bs.Delete(ctx, b.Key); err != nil {
				rep.Failures++
				continue
			}
			rep.Orphans++
			rep.Removed = append(rep.Removed, b.Key)
		}
		batch = batch[:0]
		return nil
	}
	err = bs.List(ctx, Prefix, func(info blob.Info) error {
		rep.Scanned++
		if !info.ModTime.Before(olderThan) {
			return nil
		}
		batch = append(batch, info)
		if len(batch) == 500 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	return rep, flush()
}

// PruneReport says what a prune deleted (or would have, on a dry run).
type PruneReport struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
	DryRun  bool  `json:"dry_run"`
}

// Prune deletes the data of tasks that finished before cutoff: for each
// object, task.data_deleted first (the index forgets it), then the object.
// progress, when set, hears of each object.
func Prune(ctx context.Context, db *store.DB, bs blob.Store, cutoff time.Time, dryRun bool, progress func(events.TaskData)) (*PruneReport, error) {
	rep := &PruneReport{DryRun: dryRun}
	meta := events.Meta{Actor: events.System("data-prune")}
	reason := "retention: the task finished before " + cutoff.UTC().Format(time.RFC3339)
	pageSize := 200
	if dryRun {
		pageSize = 1 << 20 // nothing is deleted, so the same rows would come again: one page
	}
	for {
		page, err := db.DataFinishedBefore(ctx, cutoff, pageSize)
		if err != nil {
			return rep, err
		}
		for _, d := range page {
			if progress != nil {
				progress(d)
			}
			rep.Objects++
			rep.Bytes += d.Size
			if dryRun {
				continue
			}
			if err := db.RecordDataDeleted(ctx, d, reason, meta); err != nil {
				return rep, fmt.Errorf("record deletion of %s: %w", d.Key, err)
			}
			if err := bs.Delete(ctx, d.Key); err != nil {
				return rep, fmt.Errorf("delete %s (its event exists; the sweep will remove it): %w", d.Key, err)
			}
		}
		if dryRun || len(page) < pageSize {
			return rep, nil
		}
	}
}

// Problem is one indexed object that does not match its event.
type Problem struct {
	DataID string `json:"data_id"`
	TaskID string `json:"task_id"`
	Key    string `json:"key"`
	Issue  string `json:"issue"`
}

// VerifyReport: every indexed object checked.
type VerifyReport struct {
	Objects  int       `json:"objects"`
	Bytes    int64     `json:"bytes"`
	Hashed   bool      `json:"hashed"`
	Problems []Problem `json:"problems"`
}

// Verify checks that every object the index names exists with its size
// and, with hash, its SHA-256 (reading every byte).
func Verify(ctx context.Context, db *store.DB, bs blob.Store, hash bool, progress func(done int, bytes int64)) (*VerifyReport, error) {
	rep := &VerifyReport{Hashed: hash, Problems: []Problem{}}
	err := db.EachTaskData(ctx, func(d events.TaskData) error {
		rep.Objects++
		rep.Bytes += d.Size
		problem := func(format string, args ...any) {
			rep.Problems = append(rep.Problems, Problem{DataID: d.ID, TaskID: d.TaskID, Key: d.Key, Issue: fmt.Sprintf(format, args...)})
		}
		info, err := bs.Stat(ctx, d.Key)
		switch {
		case errors.Is(err, blob.ErrNotFound):
			problem("missing from the store")
			return nil
		case err != nil:
			return err
		case info.Size != d.Size:
			problem("size %d, the event says %d", info.Size, d.Size)
			return nil
		}
		if hash {
			sum, err := hashObject(ctx, bs, d.Key)
			if err != nil {
				return err
			}
			if sum != d.SHA256 {
				problem("SHA-256 %s, the event says %s", sum, d.SHA256)
			}
		}
		if progress != nil {
			progress(rep.Objects, rep.Bytes)
		}
		return nil
	})
	return rep, err
}

func hashObject(ctx context.Context, bs blob.Store, key string) (string, error) {
	rc, err := bs.Open(ctx, key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ParseRetention reads DATA_RETENTION: a Go duration ("720h") or days
// ("30d"); "" or "forever" keeps data forever (0).
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "forever" || s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && n > 0 && fmt.Sprint(n) == days {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("DATA_RETENTION %q: give days (30d), a duration (720h) or forever", s)
	}
	return d, nil
}
