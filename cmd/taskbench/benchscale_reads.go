package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/api/ui"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

type benchScaleReport struct {
	Command string           `json:"command"`
	Sizes   []benchScaleSize `json:"sizes"`
}

type benchScaleSize struct {
	Label    string         `json:"label"`
	Database string         `json:"database"`
	Tasks    int64          `json:"tasks"`
	Events   int64          `json:"events"`
	Pending  int64          `json:"pending"`
	Ops      []benchScaleOp `json:"operations"`
	opByName map[string]*benchScaleOp
}

type benchScaleOp struct {
	Name  string  `json:"name"`
	Calls int     `json:"calls"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// scaleOp is one read to time: path is called with GET unless call is set.
type scaleOp struct {
	name string
	path string
	call func(ctx context.Context) error
}

// timeScaleReads starts the API on db and times every read an admin or a
// worker makes, one call at a time.
func timeScaleReads(ctx context.Context, cfg benchScaleConfig, db *scaleDB, progress io.Writer) (*benchScaleSize, error) {
	pool, err := store.Connect(ctx, db.url, 16)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	sdb, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	srv, err := api.New(api.Config{DB: sdb, Logger: zerolog.New(progress).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
		JWTSecret: []byte(hex.EncodeToString(secret)), BcryptCost: bcrypt.MinCost})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on loopback: %w", err)
	}
	pages, err := ui.New(ui.Config{API: srv, DB: sdb, Logger: zerolog.Nop(), Secret: []byte(hex.EncodeToString(secret))})
	if err != nil {
		return nil, err
	}
	pages.Register(srv.Echo())
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	base := "http://" + ln.Addr().String()

	if cfg.busy {
		// A busy day's fleet is alive: every worker's heartbeat is recent
		// (heartbeats are not events, so the build leaves them an hour old).
		if _, err := pool.Exec(ctx, `UPDATE users SET online = true, last_activity_at = now() WHERE is_worker`); err != nil {
			return nil, fmt.Errorf("bring the fleet online: %w", err)
		}
	}
	size := &benchScaleSize{Label: sizeLabel(db.tasks), Database: db.name, Events: db.events, opByName: map[string]*benchScaleOp{}}
	var taskID, chainID, workerID, workerEmail, middle string
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM worker_tasks),
		(SELECT count(*) FROM worker_tasks WHERE status = 'pending'),
		(SELECT id::text FROM worker_tasks WHERE status = 'completed' ORDER BY id LIMIT 1
		  OFFSET (SELECT count(*) / 2 FROM worker_tasks WHERE status = 'completed')),
		(SELECT id::text FROM worker_tasks WHERE retry_count > 0 ORDER BY id DESC LIMIT 1),
		(SELECT id::text FROM users WHERE is_worker ORDER BY email LIMIT 1),
		(SELECT email FROM users WHERE is_worker ORDER BY email LIMIT 1)`).
		Scan(&size.Tasks, &size.Pending, &taskID, &chainID, &workerID, &workerEmail)
	if err != nil {
		return nil, fmt.Errorf("pick tasks to read: %w", err)
	}
	var midTx, midSeq int64
	// About the middle, by seq (an index probe per partition; walking
	// half the log in position order took minutes on a busy machine).
	if err := pool.QueryRow(ctx, `SELECT tx_id::text::bigint AS tx_num, seq FROM task_events
		WHERE seq >= (SELECT (min(seq) + max(seq)) / 2 FROM task_events) ORDER BY seq LIMIT 1`).
		Scan(&midTx, &midSeq); err != nil {
		return nil, fmt.Errorf("pick the middle of the log: %w", err)
	}
	middle = events.Position{TxID: uint64(midTx), Seq: midSeq}.String()

	admin := client.New(base, nil)
	login, err := admin.Login(ctx, scaleAdminEmail, scalePassword)
	if err != nil {
		return nil, fmt.Errorf("log in as the bench admin: %w", err)
	}
	worker := client.New(base, nil)
	if _, err := worker.Login(ctx, workerEmail, scalePassword); err != nil {
		return nil, fmt.Errorf("log in as %s: %w", workerEmail, err)
	}
	var typeID string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM task_types ORDER BY name LIMIT 1`).Scan(&typeID); err != nil {
		return nil, err
	}

	get := func(c *client.Client, path string) func(context.Context) error {
		return func(ctx context.Context) error {
			var out json.RawMessage
			return c.Do(ctx, http.MethodGet, path, nil, &out)
		}
	}
	a := "/api/v1/admin/workers"
	ops := []scaleOp{
		{name: "GET /admin/workers/stats", path: a + "/stats"},
		{name: "GET /admin/workers", path: a},
		{name: "GET /admin/workers/capacity", path: a + "/capacity"},
		{name: "GET /admin/workers/tasks", path: a + "/tasks"},
		{name: "GET /admin/workers/tasks?status=pending", path: a + "/tasks?status=pending"},
		{name: "GET /admin/workers/tasks?status=completed", path: a + "/tasks?status=completed"},
		{name: "GET /admin/workers/tasks?status=failed", path: a + "/tasks?status=failed"},
		{name: "GET /admin/workers/tasks?unassigned=true", path: a + "/tasks?unassigned=true"},
		{name: "GET /admin/workers/tasks?assigned_to=W", path: a + "/tasks?assigned_to=" + workerID},
		{name: "GET /admin/workers/tasks?task_type_id=T", path: a + "/tasks?task_type_id=" + typeID},
		{name: "GET /admin/workers/tasks?priority=urgent", path: a + "/tasks?priority=urgent"},
		{name: "GET /admin/workers/tasks?retries=true", path: a + "/tasks?retries=true"},
		{name: "GET /admin/workers/tasks/:id", path: a + "/tasks/" + taskID},
		{name: "GET /admin/workers/tasks/:id?at=", path: a + "/tasks/" + taskID + "?at=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339))},
		{name: "GET /admin/workers/tasks/:id/events", path: a + "/tasks/" + taskID + "/events"},
		{name: "GET /admin/workers/tasks/:id/chain", path: a + "/tasks/" + chainID + "/chain"},
		{name: "GET /admin/workers/task-types", path: a + "/task-types"},
		{name: "GET /admin/workers/tasks/:id/usage", path: a + "/tasks/" + chainID + "/usage"},
		{name: "GET /admin/llm-usage", path: "/api/v1/admin/llm-usage"},
		{name: "GET /admin/events?limit=500 (first page)", path: "/api/v1/admin/events?limit=500"},
		{name: "GET /admin/events?limit=500 (middle page)", path: "/api/v1/admin/events?limit=500&after=" + middle},
		{name: "GET /admin/events?worker_id=W&limit=100", path: "/api/v1/admin/events?limit=100&worker_id=" + workerID},
		{name: "GET /worker/tasks", path: "/api/v1/worker/tasks", call: get(worker, "/api/v1/worker/tasks")},
		{name: "GET /worker/tasks?all=true", path: "/api/v1/worker/tasks?all=true", call: get(worker, "/api/v1/worker/tasks?all=true")},
		{name: "POST /worker/heartbeat", call: func(ctx context.Context) error {
			return worker.Heartbeat(ctx, client.Heartbeat{Status: "idle"})
		}},
		{name: "claim + complete", call: func(ctx context.Context) error {
			t, err := worker.Claim(ctx)
			if err != nil || t == nil {
				return err // an empty queue times the empty claim
			}
			_, err = worker.Complete(ctx, t.ID)
			return err
		}},
	}
	ops = append(ops, uiScaleOps(base, login.Token, taskID, workerID, typeID)...)
	ops = append(ops, scaleOp{name: "monitor sample (store.SampleOps)", call: func(ctx context.Context) error {
		_, err := sdb.SampleOps(ctx)
		return err
	}})
	calls := make([]func(context.Context) error, len(ops))
	for i, op := range ops {
		calls[i] = op.call
		if calls[i] == nil {
			calls[i] = get(admin, op.path)
		}
		if err := calls[i](ctx); err != nil { // warm-up, untimed
			return nil, fmt.Errorf("%s: %w", op.name, err)
		}
	}
	// Round by round, each operation once a round: a stall of the machine
	// (a checkpoint, another process) lands on several operations once each,
	// not on one operation's calls in a row.
	times := make([][]time.Duration, len(ops))
	for round := range cfg.calls {
		for i, op := range ops {
			t0 := time.Now()
			if err := calls[i](ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", op.name, err)
			}
			times[i] = append(times[i], time.Since(t0))
		}
		if (round+1)%max(1, cfg.calls/4) == 0 && round+1 < cfg.calls {
			fmt.Fprintf(progress, "bench-scale: %s: %d of %d rounds\n", size.Label, round+1, cfg.calls)
		}
	}
	for i, op := range ops {
		slices.Sort(times[i])
		r := benchScaleOp{Name: op.name, Calls: len(times[i]), P50Ms: percentileMs(times[i], 0.50), P99Ms: percentileMs(times[i], 0.99)}
		size.Ops = append(size.Ops, r)
		fmt.Fprintf(progress, "bench-scale: %s: %-44s p50 %8.2f ms  p99 %8.2f ms\n", size.Label, op.name, r.P50Ms, r.P99Ms)
	}
	return size, nil
}

// uiScaleOps are the admin UI's pages (api/ui), read with the session
// cookie a browser sends: the dashboard, the task list and its filters, a
// task, the types, the workers and the events.
func uiScaleOps(base, token, taskID, workerID, typeID string) []scaleOp {
	hc := &http.Client{Timeout: time.Minute}
	page := func(path string) scaleOp {
		return scaleOp{name: "UI " + path, call: func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			if err != nil {
				return err
			}
			req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: token})
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", path, resp.Status)
			}
			return nil
		}}
	}
	return []scaleOp{
		page("/"),
		page("/tasks"),
		page("/tasks?status=completed"),
		page("/tasks?status=pending"),
		page("/tasks?queue=1"),
		page("/tasks?stuck=1"),
		page("/tasks?assignee=" + workerID),
		page("/tasks?type=" + typeID),
		page("/tasks?q=task+12345"),
		page("/tasks/" + taskID),
		page("/types"),
		page("/workers"),
		page("/events"),
	}
}

// printScaleTable prints one row per operation, p50 / p99 in ms per size.
func printScaleTable(w io.Writer, rep *benchScaleReport) {
	fmt.Fprintf(w, "%s\n\n", rep.Command)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"operation (p50 / p99 ms)"}
	for _, s := range rep.Sizes {
		head = append(head, fmt.Sprintf("%s (%d tasks, %d events)", s.Label, s.Tasks, s.Events))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	if len(rep.Sizes) == 0 {
		tw.Flush()
		return
	}
	for i, op := range rep.Sizes[0].Ops {
		row := []string{op.Name}
		for _, s := range rep.Sizes {
			if i < len(s.Ops) {
				row = append(row, fmt.Sprintf("%.2f / %.2f", s.Ops[i].P50Ms, s.Ops[i].P99Ms))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}
