package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
)

// uploadAttempts bounds the tries of one file before the task fails.
const uploadAttempts = 5

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// outputFile is one file the command left in $TASK_OUTPUT_DIR.
type outputFile struct {
	path, dataType, name string
	size                 int64
}

// outputFiles lists what the command left: a file directly in the output
// directory has the data type "output", one in a subdirectory has that
// subdirectory's name; deeper paths are joined into the name with '_'.
// Names are made safe for the service (letters, digits, '.', '_', '-').
func outputFiles(dir string) ([]outputFile, error) {
	var out []outputFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // directories, and symlinks that could point anywhere
		}
		rel, _ := filepath.Rel(dir, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		dataType, nameParts := "output", parts
		if len(parts) > 1 {
			dataType, nameParts = parts[0], parts[1:]
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, outputFile{path: p, dataType: safeName(dataType, events.MaxDataTypeLen, false),
			name: safeName(strings.Join(nameParts, "_"), events.MaxFilenameLen, true), size: info.Size()})
		return nil
	})
	if os.IsNotExist(err) {
		return nil, nil
	}
	return out, err
}

func safeName(s string, max int, dots bool) string {
	s = unsafeName.ReplaceAllString(s, "_")
	if !dots {
		s = strings.ReplaceAll(s, ".", "_")
	}
	if s == "" || s[0] == '.' || s[0] == '-' || (!dots && s[0] == '_') {
		s = "f" + s
	}
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return s
}

// uploadOutput uploads every output file, each with retries and backoff,
// logging progress. The error names the file that could not be uploaded.
func (w *Worker) uploadOutput(ctx context.Context, log zerolog.Logger, taskID, dir string) (int, int64, error) {
	files, err := outputFiles(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("list the output directory: %w", err)
	}
	if len(files) == 0 {
		return 0, 0, nil
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	log.Info().Int("files", len(files)).Str("size", events.HumanBytes(total)).Msg("uploading the task's output")
	var sent int64
	for i, f := range files {
		start := time.Now()
		b := backoff{max: 30 * time.Second}
		for attempt := 1; ; attempt++ {
			err = w.uploadFile(ctx, log, taskID, f)
			if err == nil {
				break
			}
			if attempt >= uploadAttempts || !transient(ctx, err) {
				return i, sent, fmt.Errorf("upload %s/%s failed after %d attempts: %w", f.dataType, f.name, attempt, err)
			}
			d := b.next()
			log.Warn().Err(err).Str("file", f.dataType+"/"+f.name).Int("attempt", attempt).Str("retry_in", logDuration(d)).Msg("upload failed; will retry")
			if !sleepCtx(ctx, d) {
				return i, sent, fmt.Errorf("upload %s/%s: %w", f.dataType, f.name, context.Cause(ctx))
			}
		}
		sent += f.size
		took := time.Since(start)
		log.Info().Str("file", f.dataType+"/"+f.name).Str("size", events.HumanBytes(f.size)).Str("took", logDuration(took)).
			Str("rate", rate(f.size, took)).Int("done", i+1).Int("of", len(files)).Msg("uploaded")
	}
	return len(files), sent, nil
}

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return events.HumanBytes(int64(float64(n)/d.Seconds())) + "/s"
}

// uploadFile sends one file; a long one logs its progress every 5 s.
func (w *Worker) uploadFile(ctx context.Context, log zerolog.Logger, taskID string, f outputFile) error {
	return w.api.call(ctx, 0, func(ctx context.Context) error {
		fh, err := os.Open(f.path)
		if err != nil {
			return err
		}
		defer fh.Close()
		pr := &progress{r: fh, log: log, file: f, start: time.Now(), last: time.Now()}
		_, err = w.api.c.UploadData(ctx, taskID, f.dataType, f.name, "", pr, f.size)
		return err
	})
}

type progress struct {
	r           io.Reader
	log         zerolog.Logger
	file        outputFile
	n           int64
	start, last time.Time
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) >= 5*time.Second {
		p.last = now
		p.log.Info().Str("file", p.file.dataType+"/"+p.file.name).Str("sent", events.HumanBytes(p.n)).
			Str("of", events.HumanBytes(p.file.size)).Str("rate", rate(p.n, now.Sub(p.start))).Msg("uploading")
	}
	return n, err
}
