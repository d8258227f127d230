package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/dataops"
)

// dataConfig configures task data: where objects live, the upload bounds
// and the orphan sweep.
type dataConfig struct {
	dir          string
	s3           blob.S3Config
	maxFileBytes int64
	maxTaskBytes int64
	maxTaskFiles int
	urlTTL       time.Duration
	sweepEvery   time.Duration
	sweepGrace   time.Duration
}

func (c *dataConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.dir, "data-dir", "task-data", "directory for task data when no S3 bucket is set (env DATA_DIR)")
	fs.StringVar(&c.s3.Bucket, "data-s3-bucket", "", "keep task data in this S3 bucket instead; credentials from the AWS chain (env DATA_S3_BUCKET)")
	fs.StringVar(&c.s3.Endpoint, "data-s3-endpoint", "", "S3-compatible endpoint URL, empty for AWS (env DATA_S3_ENDPOINT)")
	fs.StringVar(&c.s3.Region, "data-s3-region", cmp.Or(os.Getenv("AWS_REGION"), "us-east-1"), "S3 region (env DATA_S3_REGION)")
	fs.BoolVar(&c.s3.PathStyle, "data-s3-path-style", false, "address the bucket as endpoint/bucket (MinIO, versitygw, Ceph) (env DATA_S3_PATH_STYLE)")
	fs.Int64Var(&c.maxFileBytes, "data-max-bytes", 1<<30, "largest uploaded file, in bytes (env DATA_MAX_BYTES)")
	fs.Int64Var(&c.maxTaskBytes, "data-max-task-bytes", 10<<30, "most data per task, in bytes (env DATA_MAX_TASK_BYTES)")
	fs.IntVar(&c.maxTaskFiles, "data-max-files-per-task", 1000, "most files per task, counting empty ones (env DATA_MAX_FILES_PER_TASK)")
	fs.DurationVar(&c.urlTTL, "data-url-ttl", 15*time.Minute, "lifetime of a presigned S3 download URL (env DATA_URL_TTL)")
	fs.DurationVar(&c.sweepEvery, "data-sweep-interval", time.Hour, "how often to remove objects of uploads that died; 0 turns it off (env DATA_SWEEP_INTERVAL)")
	fs.DurationVar(&c.sweepGrace, "data-sweep-grace", time.Hour, "the sweep leaves objects younger than this alone (env DATA_SWEEP_GRACE)")
}

// openData opens the blob store and says where task data goes.
func openData(ctx context.Context, c dataConfig, log zerolog.Logger) (blob.Store, error) {
	bs, err := blob.Open(ctx, blob.Config{Dir: c.dir, S3: c.s3})
	if err != nil {
		return nil, fmt.Errorf("task data: %w (set DATA_DIR to a writable directory, or DATA_S3_BUCKET and its settings)", err)
	}
	if c.s3.Bucket != "" {
		log.Info().Str("bucket", c.s3.Bucket).Str("endpoint", c.s3.Endpoint).Msg("task data in S3")
	} else {
		abs, _ := filepath.Abs(c.dir)
		log.Info().Str("dir", abs).Msg("task data on the filesystem")
	}
	return bs, nil
}

// sweeper runs the orphan sweep at start and then every interval.
type sweeper struct {
	stop func()
	wg   sync.WaitGroup
}

func startSweeper(ctx context.Context, c dataConfig, db *store.DB, bs blob.Store, log zerolog.Logger) *sweeper {
	s := &sweeper{stop: func() {}}
	if c.sweepEvery <= 0 {
		return s
	}
	ctx, cancel := context.WithCancel(ctx)
	s.stop = func() { cancel(); s.wg.Wait() }
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(c.sweepEvery)
		defer t.Stop()
		for {
			rep, err := dataops.Sweep(ctx, db, bs, time.Now().Add(-c.sweepGrace))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn().Err(err).Msg("task data sweep failed; it runs again later")
			case err == nil && (rep.Pending > 0 || rep.Orphans > 0 || rep.Failures > 0):
				log.Info().Int("pending", rep.Pending).Int("orphans", rep.Orphans).Int("failures", rep.Failures).
					Strs("removed", rep.Removed).Msg("task data sweep removed what dead uploads left")
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}
