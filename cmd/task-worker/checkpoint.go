package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// maxCheckpointFile bounds the checkpoint file read into memory: twice the
// service's bound on the compact state, room for indentation.
const maxCheckpointFile = 2 * events.MaxCheckpointBytes

// checkpointer uploads the file in $TASK_CHECKPOINT as the task's
// checkpoint: every interval when its content changed, and once more when
// the command exits (sync). It starts from the content the worker wrote
// there (the checkpoint the claim carried, or nothing), so an untouched
// file is never uploaded.
type checkpointer struct {
	path   string
	every  time.Duration
	log    zerolog.Logger
	upload func(ctx context.Context, state json.RawMessage, final bool) error

	mu      sync.Mutex // one upload at a time: the ticker's and the final one
	last    []byte     // the content last uploaded (or written by the worker)
	refused []byte     // content the worker or the service refused: not retried
	gone    bool       // the service says the task is no longer ours

	stop chan struct{}
	done chan struct{}
}

// newCheckpointer watches path, whose content is initial.
func newCheckpointer(path string, initial []byte, every time.Duration, log zerolog.Logger,
	upload func(ctx context.Context, state json.RawMessage, final bool) error) *checkpointer {
	return &checkpointer{path: path, every: every, log: log, upload: upload, last: bytes.TrimSpace(initial),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Start uploads on the interval until Close.
func (c *checkpointer) Start(ctx context.Context) {
	go func() {
		defer close(c.done)
		tick := time.NewTicker(c.every)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				c.sync(ctx, false)
			}
		}
	}()
}

// Close stops the interval and uploads what changed since, a last time.
func (c *checkpointer) Close(ctx context.Context) {
	close(c.stop)
	<-c.done
	c.sync(ctx, true)
}

// sync uploads the file's content if it changed and is a valid state.
func (c *checkpointer) sync(ctx context.Context, final bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return
	}
	content, err := readCapped(c.path, maxCheckpointFile)
	if err != nil {
		if !os.IsNotExist(err) {
			c.log.Warn().Err(err).Msg("cannot read the checkpoint file; not uploaded")
		}
		return
	}
	content = bytes.TrimSpace(content)
	if len(content) == 0 || bytes.Equal(content, c.last) || bytes.Equal(content, c.refused) {
		return
	}
	state, err := events.CompactState(content)
	if err != nil {
		c.refused = content
		c.log.Warn().Err(err).Msg("the checkpoint file does not hold a valid state (JSON, at most 64 KiB compact); not uploaded")
		return
	}
	switch err := c.upload(ctx, state, final); {
	case err == nil:
		c.last = content
		c.log.Debug().Int("size_bytes", len(state)).Bool("final", final).Msg("checkpoint uploaded")
	case gone(err):
		c.gone = true
		c.log.Warn().Err(err).Msg("the task is no longer this worker's; its checkpoint is not uploaded")
	case isRefusal(err):
		c.refused = content
		c.log.Warn().Err(err).Msg("the service refused the checkpoint")
	default:
		// Transient: the next tick (or the final sync) tries again.
		c.log.Warn().Err(err).Bool("final", final).Msg("could not upload the checkpoint")
	}
}

// readCapped reads at most limit bytes of path; a longer file is an error.
func readCapped(path string, limit int) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b := make([]byte, limit+1)
	n, _ := readFull(fh, b)
	if n > limit {
		return nil, errTooLarge(limit)
	}
	return b[:n], nil
}

type errTooLarge int

func (e errTooLarge) Error() string {
	return "the file is larger than " + events.HumanBytes(int64(e))
}

// isRefusal reports whether the service refused the request itself (400,
// 413): sending it again cannot help.
func isRefusal(err error) bool {
	return client.IsStatus(err, http.StatusBadRequest) || client.IsStatus(err, http.StatusRequestEntityTooLarge)
}

// finalCheckpointWait bounds the last upload when the command exits, so an
// unreachable service delays the report by this much at most.
const finalCheckpointWait = 30 * time.Second

// startCheckpoints uploads the task's checkpoint file while the command
// runs; the caller closes it when the command exits.
func (w *Worker) startCheckpoints(ctx context.Context, log zerolog.Logger, t *claimedTask, f taskFiles) *checkpointer {
	cp := newCheckpointer(f.Checkpoint, f.checkpointInitial, w.cfg.CheckpointEvery, log,
		func(ctx context.Context, state json.RawMessage, final bool) error {
			put := func(ctx context.Context) error {
				_, err := w.api.c.PutCheckpoint(ctx, t.ID, state)
				return err
			}
			if !final {
				return w.api.call(ctx, callTimeout, put) // a failure is tried again at the next tick
			}
			ctx, cancel := context.WithTimeout(ctx, finalCheckpointWait)
			defer cancel()
			return w.api.retry(ctx, "upload checkpoint", put)
		})
	cp.Start(ctx)
	return cp
}
