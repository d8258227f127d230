package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/cmd/internal/settings"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/dataops"
)

var tasksDataSpec = cmdSpec{
	name: "tasks data", args: "TASK [--download DIR] [--json]",
	summary: "List the files workers uploaded for a task. With --download, save each into DIR/DATA_TYPE/FILENAME\n" +
		"and check its SHA-256 against the one recorded at upload.",
	example: "taskctl tasks data 0190f4c2-7d1e-7a3b-9c4d-5e6f7a8b9c0d --download ./nvda",
}

func (a *app) tasksData(args []string) int {
	spec := tasksDataSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	dir := fs.String("download", "", "save the files under this directory")
	asJSON := fs.Bool("json", false, "print the list as JSON")
	pos, code, ok := a.parseArgs(fs, spec, args, 1, "TASK (a task id)")
	if !ok {
		return code
	}
	c, ctx, cancel, err := a.connect(*api)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer cancel()
	list, err := c.TaskData(ctx, pos[0])
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON && *dir == "" {
		return a.printJSON(list)
	}
	if len(list) == 0 {
		fmt.Fprintln(a.stdout, "No data uploaded for this task.")
		return exitOK
	}
	var total int64
	tw := a.table()
	fmt.Fprintln(tw, "DATA TYPE\tFILE\tSIZE\tUPLOADED\tSHA-256\tID")
	for _, d := range list {
		total += d.Size
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s…\t%s\n", d.DataType, d.Filename, events.HumanBytes(d.Size), fmtTime(d.UploadedAt), d.SHA256[:12], d.ID)
	}
	tw.Flush()
	fmt.Fprintf(a.stdout, "%d files, %s\n", len(list), events.HumanBytes(total))
	if *dir == "" {
		return exitOK
	}
	for i, d := range list {
		path, err := downloadOne(ctx, c, d, *dir)
		if err != nil {
			return a.fail(spec.name, fmt.Errorf("%s/%s: %w", d.DataType, d.Filename, err))
		}
		fmt.Fprintf(a.stderr, "[%d/%d] %s (%s, SHA-256 checked)\n", i+1, len(list), path, events.HumanBytes(d.Size))
	}
	return exitOK
}

// downloadOne saves d under dir, writing to a temporary name first.
func downloadOne(ctx context.Context, c *client.Client, d events.TaskData, dir string) (string, error) {
	if events.ValidateDataType(d.DataType) != nil || events.ValidateFilename(d.Filename) != nil {
		return "", fmt.Errorf("the server sent an unsafe name")
	}
	body, err := c.Download(ctx, client.AdminDataPath(d.TaskID, d.ID))
	if err != nil {
		return "", err
	}
	defer body.Close()
	target := filepath.Join(dir, d.DataType, d.Filename)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".download-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != d.Size || sum != d.SHA256 {
		return "", fmt.Errorf("got %d bytes with SHA-256 %s; the upload recorded %d bytes, %s", n, sum, d.Size, d.SHA256)
	}
	return target, os.Rename(tmp.Name(), target)
}

var dataCommand = group("data", "Task data operations with direct database and store access: prune, verify, sweep.\n"+
	"They read the same settings as task-service: DATABASE_URL, DATA_DIR or DATA_S3_BUCKET (with DATA_S3_ENDPOINT,\n"+
	"DATA_S3_REGION, DATA_S3_PATH_STYLE and the AWS credential chain).", map[string]subcommand{
	"prune":  {"delete the data of tasks finished longer ago than DATA_RETENTION (task.data_deleted events)", (*app).dataPrune},
	"verify": {"check that every recorded object exists with its size (and --hash: its SHA-256)", (*app).dataVerify},
	"sweep":  {"remove objects no event names and uploads that died, older than --older-than", (*app).dataSweep},
})

// dataEnv opens the database and the blob store from the environment.
func (a *app) dataEnv(ctx context.Context, dbURL string) (*store.DB, blob.Store, func(), error) {
	if dbURL == "" {
		return nil, nil, nil, usagef("no database: give --database-url or set DATABASE_URL")
	}
	bs, err := a.blobEnv(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := store.Connect(ctx, dbURL, 4)
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return db, bs, pool.Close, nil
}

// blobEnv opens the task-data store as task-service's settings name it.
func (a *app) blobEnv(ctx context.Context) (blob.Store, error) {
	pathStyle, err := settings.EnvBool(func(k string) (string, bool) { v := a.getenv(k); return v, v != "" }, "DATA_S3_PATH_STYLE", false)
	if err != nil {
		return nil, usagef("%v", err)
	}
	cfg := blob.Config{Dir: a.getenv("DATA_DIR"), S3: blob.S3Config{
		Bucket: a.getenv("DATA_S3_BUCKET"), Endpoint: a.getenv("DATA_S3_ENDPOINT"), Region: a.getenv("DATA_S3_REGION"),
		PathStyle: pathStyle}}
	if cfg.Dir == "" {
		cfg.Dir = "task-data" // task-service's default
	}
	if cfg.S3.Bucket == "" {
		if _, err := os.Stat(cfg.Dir); err != nil {
			return nil, usagef("data directory %s: %v (set DATA_DIR as task-service has it, or DATA_S3_BUCKET)", cfg.Dir, err)
		}
	}
	return blob.Open(ctx, cfg)
}

var dataPruneSpec = cmdSpec{
	name: "data prune", args: "[--retention 30d] [--dry-run] [--database-url URL]",
	summary: "Delete the data of tasks that finished (completed, failed or cancelled) longer ago than the\n" +
		"retention (--retention, default $DATA_RETENTION; 'forever' or unset keeps everything). Each object\n" +
		"gets a task.data_deleted event first, then leaves the store. Nothing else ever deletes task data.",
	example: "DATA_RETENTION=90d taskctl data prune --dry-run",
}

func (a *app) dataPrune(args []string) int {
	spec := dataPruneSpec
	fs := flagSet(spec)
	retention := fs.String("retention", a.getenv("DATA_RETENTION"), "how long to keep a finished task's data: 30d, 720h or forever (default $DATA_RETENTION)")
	dry := fs.Bool("dry-run", false, "list what would be deleted, delete nothing")
	dbURL := fs.String("database-url", a.getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if _, code, ok := a.parseArgs(fs, spec, args, 0, ""); !ok {
		return code
	}
	keep, err := dataops.ParseRetention(*retention)
	if err != nil {
		return a.fail(spec.name, usagef("%v", err))
	}
	if keep == 0 {
		fmt.Fprintln(a.stdout, "Retention is forever (DATA_RETENTION unset): nothing to prune.")
		return exitOK
	}
	ctx, cancel := a.signalContext()
	defer cancel()
	db, bs, closeDB, err := a.dataEnv(ctx, *dbURL)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer closeDB()
	cutoff := time.Now().Add(-keep)
	rep, err := dataops.Prune(ctx, db, bs, cutoff, *dry, func(d events.TaskData) {
		if !*asJSON {
			fmt.Fprintf(a.stderr, "%s %s (%s)\n", map[bool]string{true: "would delete", false: "deleting"}[*dry], d.Key, events.HumanBytes(d.Size))
		}
	})
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(rep)
	}
	verb := "Deleted"
	if *dry {
		verb = "Would delete"
	}
	fmt.Fprintf(a.stdout, "%s %d objects, %s, of tasks finished before %s.\n", verb, rep.Objects, events.HumanBytes(rep.Bytes), fmtTime(cutoff))
	return exitOK
}

var dataVerifySpec = cmdSpec{
	name: "data verify", args: "[--hash] [--database-url URL]",
	summary: "Check every object the events record: it must exist in the store with the recorded size, and\n" +
		"with --hash the recorded SHA-256 (reads every byte). Exit 1 when any object is missing or differs.",
	example: "taskctl data verify --hash",
}

func (a *app) dataVerify(args []string) int {
	spec := dataVerifySpec
	fs := flagSet(spec)
	hash := fs.Bool("hash", false, "also read every object and compare its SHA-256")
	dbURL := fs.String("database-url", a.getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if _, code, ok := a.parseArgs(fs, spec, args, 0, ""); !ok {
		return code
	}
	ctx, cancel := a.signalContext()
	defer cancel()
	db, bs, closeDB, err := a.dataEnv(ctx, *dbURL)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer closeDB()
	last := time.Now()
	rep, err := dataops.Verify(ctx, db, bs, *hash, func(done int, bytes int64) {
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			fmt.Fprintf(a.stderr, "checked %d objects, %s\n", done, events.HumanBytes(bytes))
		}
	})
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		if code := a.printJSON(rep); code != exitOK || len(rep.Problems) == 0 {
			return code
		}
		return exitFailure
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(a.stdout, "%s  %s  (task %s, data %s)\n", p.Key, p.Issue, p.TaskID, p.DataID)
	}
	what := "sizes"
	if *hash {
		what = "sizes and SHA-256"
	}
	fmt.Fprintf(a.stdout, "%d objects, %s: %d problems (%s checked, %s)\n", rep.Objects, events.HumanBytes(rep.Bytes), len(rep.Problems), what, bs.Kind())
	if len(rep.Problems) > 0 {
		return exitFailure
	}
	return exitOK
}

var dataSweepSpec = cmdSpec{
	name: "data sweep", args: "[--older-than 1h] [--database-url URL]",
	summary: "Remove what dead uploads left: pending temporary files or multipart uploads, and complete objects\n" +
		"that no event names (a crash between the object and its event). Only what is older than\n" +
		"--older-than, so uploads in flight are safe. task-service runs this every DATA_SWEEP_INTERVAL too.",
	example: "taskctl data sweep --older-than 2h",
}

func (a *app) dataSweep(args []string) int {
	spec := dataSweepSpec
	fs := flagSet(spec)
	older := fs.Duration("older-than", time.Hour, "leave anything younger than this alone")
	dbURL := fs.String("database-url", a.getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if _, code, ok := a.parseArgs(fs, spec, args, 0, ""); !ok {
		return code
	}
	ctx, cancel := a.signalContext()
	defer cancel()
	db, bs, closeDB, err := a.dataEnv(ctx, *dbURL)
	if err != nil {
		return a.fail(spec.name, err)
	}
	defer closeDB()
	rep, err := dataops.Sweep(ctx, db, bs, time.Now().Add(-*older))
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(rep)
	}
	for _, k := range rep.Removed {
		fmt.Fprintln(a.stderr, "removed "+k)
	}
	fmt.Fprintf(a.stdout, "Scanned %d objects: removed %d orphans and %d pending uploads (%d failed: run again).\n",
		rep.Scanned, rep.Orphans, rep.Pending, rep.Failures)
	return exitOK
}
