package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/clawdbot/task-service/api/client"
)

var tasksImportSpec = cmdSpec{
	name: "tasks import", args: "FILE.jsonl [flags]",
	summary: "Create the tasks of a JSON Lines file (one task per line, as POST /tasks takes it; - reads\n" +
		"stdin) through the batch route, up to 1,000 a request, each request one transaction. Every\n" +
		"line is answered on its own: the lines that fail are listed with their error and the exit\n" +
		"code is 1. Each request carries an Idempotency-Key made from its lines and its place in the\n" +
		"file, so running the same import again within 24 hours creates nothing twice.",
	example: `taskctl tasks import crawls.jsonl --type reddit_crawl
# crawls.jsonl:
# {"title": "Crawl NVDA", "params": {"ticker": "NVDA"}, "unique_key": "crawl:NVDA"}
# {"title": "Crawl AMD", "params": {"ticker": "AMD"}, "priority": "high"}`,
}

// importLine is one line of the file that is sent.
type importLine struct {
	n    int // its line number
	task json.RawMessage
}

// importResult is a line's outcome, as --json prints it.
type importResult struct {
	Line   int           `json:"line"`
	Status int           `json:"status"`
	ID     string        `json:"id,omitempty"`
	Error  *client.Error `json:"error,omitempty"`
}

// importBytes bounds one request's lines, under the route's 16 MiB.
const importBytes = 12 << 20

func (a *app) tasksImport(args []string) int {
	spec := tasksImportSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	typeRef := fs.String("type", "", "task type (name or id) of the lines without a task_type_id")
	batch := fs.Int("batch", client.MaxCreateTasks, "lines per request (1-1000)")
	asJSON := fs.Bool("json", false, "print every line's outcome as JSON")
	call, code := a.start(fs, spec, args, api, 1, "FILE.jsonl")
	if call == nil {
		return code
	}
	defer call.cancel()
	if *batch < 1 || *batch > client.MaxCreateTasks {
		return a.fail(spec.name, usagef("--batch must be from 1 to %d", client.MaxCreateTasks))
	}
	typeID := ""
	if *typeRef != "" {
		tt, err := resolveType(call.ctx, call.c, *typeRef)
		if err != nil {
			return a.fail(spec.name, err)
		}
		typeID = tt.ID
	}
	in, closeIn, err := openInput(call.pos[0])
	if err != nil {
		return a.fail(spec.name, usagef("%v", err))
	}
	defer closeIn()
	imp := &importer{a: a, c: call.c, typeID: typeID, batch: *batch}
	if err := imp.run(call.ctx, in); err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		if code := a.printJSON(imp.results); code != exitOK {
			return code
		}
	} else {
		for _, r := range imp.results {
			if r.Error != nil {
				fmt.Fprintf(a.stdout, "line %d: %v\n", r.Line, r.Error)
			}
		}
		fmt.Fprintf(a.stdout, "Created %d tasks from %d lines; %d already there (their unique key), %d failed.\n",
			imp.created, len(imp.results), imp.existing, imp.failed)
	}
	if imp.failed > 0 {
		return exitFailure
	}
	return exitOK
}

func openInput(path string) (io.Reader, func(), error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// importer sends a file's lines in batches and keeps their outcomes.
type importer struct {
	a      *app
	c      *client.Client
	typeID string
	batch  int

	results                   []importResult
	created, existing, failed int
	requests                  int
}

func (imp *importer) run(ctx context.Context, in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	var pending []importLine
	size, n := 0, 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		task, err := imp.task(line)
		if err != nil {
			imp.fail(n, err)
			continue
		}
		if len(pending) == imp.batch || size+len(task) > importBytes {
			if err := imp.send(ctx, pending); err != nil {
				return err
			}
			pending, size = nil, 0
		}
		pending = append(pending, importLine{n: n, task: task})
		size += len(task)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read line %d: %w", n+1, err)
	}
	if len(pending) > 0 {
		return imp.send(ctx, pending)
	}
	return nil
}

// task is a line as the batch's item: a JSON object, with the --type's id
// when it names no type.
func (imp *importer) task(line []byte) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if _, ok := fields["task_type_id"]; ok || imp.typeID == "" {
		return json.RawMessage(append([]byte(nil), line...)), nil
	}
	fields["task_type_id"], _ = json.Marshal(imp.typeID)
	return json.Marshal(fields)
}

func (imp *importer) fail(line int, err error) {
	imp.failed++
	imp.results = append(imp.results, importResult{Line: line, Status: 400,
		Error: &client.Error{Status: 400, Code: "validation_failed", Message: err.Error()}})
}

// send creates one batch of lines. Its key is the hash of its place and
// its lines: the same import run again sends the same keys.
func (imp *importer) send(ctx context.Context, lines []importLine) error {
	h := sha256.New()
	fmt.Fprintf(h, "%d\n", imp.requests)
	tasks := make([]json.RawMessage, len(lines))
	for i, l := range lines {
		tasks[i] = l.task
		h.Write(l.task)
		h.Write([]byte{'\n'})
	}
	imp.requests++
	key := "taskctl-import-" + hex.EncodeToString(h.Sum(nil))[:40]
	out, err := imp.c.CreateTasksRaw(client.WithIdempotencyKey(ctx, key), tasks)
	if err != nil {
		return fmt.Errorf("lines %d-%d: %w", lines[0].n, lines[len(lines)-1].n, err)
	}
	for i, it := range out.Items {
		r := importResult{Line: lines[i].n, Status: it.Status, ID: it.ID}
		switch {
		case !it.Success:
			imp.failed++
			r.Error, _ = it.Err().(*client.Error)
		case it.Status == 201:
			imp.created++
		default:
			imp.existing++
		}
		imp.results = append(imp.results, r)
	}
	if imp.requests > 1 || len(lines) == imp.batch {
		fmt.Fprintf(imp.a.stderr, "taskctl tasks import: %d lines done: %d created, %d failed\n",
			len(imp.results), imp.created, imp.failed)
	}
	return nil
}
