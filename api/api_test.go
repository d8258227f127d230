package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/apitest"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/storetest"
)

const (
	adminEmail    = "admin@example.com"
	adminPassword = "admin-password"
	workerPass    = "worker-password"
)

// clock is the store's clock; tests move it forward instead of sleeping.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// bundle is what a test gets from setup: a server on a fresh database and
// the clients and helpers to drive it.
type bundle struct {
	t        *testing.T
	ctx      context.Context
	srv      *api.Server
	contract *apitest.Contract
	db       *store.DB
	pool     *pgxpool.Pool
	url      string
	secret   []byte
	clock    *clock
	admin    *client.Client // an admin without the worker role
	adminID  string
	http     *http.Client
	reg      *prometheus.Registry
}

// metricSum reads a counter or gauge from the server's registry: the sum of
// its series whose labels include every name/value pair given (0 when none).
func metricSum(t *testing.T, reg *prometheus.Registry, name string, labelPairs ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k := 0; k+1 < len(labelPairs); k += 2 {
				if labels[labelPairs[k]] != labelPairs[k+1] {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// handled counts the requests the server has finished (its handler and
// what it deferred returned) for a method and route pattern.
func (b *bundle) handled(t *testing.T, method, route string) float64 {
	return metricSum(t, b.reg, "taskservice_http_requests_total", "method", method, "route", route)
}

// worker is a logged-in worker.
type worker struct {
	*client.Client
	ID    string
	Email string
	Limit int
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, nil)
}

// setupHub is setup with the hub wired as cmd/task-service does: every
// commit wakes it, and the server's long-polls listen to it.
func setupHub(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, store.NewHub())
}

// setupWith serves the API on a fresh database, with hub when not nil; an
// admin (not a worker) is created and logged in.
func setupWith(t *testing.T, hub *store.Hub, opts ...func(*api.Config)) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	clk := &clock{}
	reg := prometheus.NewRegistry()
	cfg := store.Config{Projector: projections.Projector{}, Now: clk.Now, Registerer: reg}
	if hub != nil {
		cfg.AfterCommit = hub.Wake
	}
	db, err := store.New(pool, cfg)
	require.NoError(t, err)
	secret := []byte("test-secret-0123456789abcdef")
	dataStore, err := blob.NewFS(t.TempDir())
	require.NoError(t, err)
	apiCfg := api.Config{
		DB: db, JWTSecret: secret, BcryptCost: bcrypt.MinCost, Hub: hub, Registry: reg,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Data:   api.DataConfig{Store: dataStore},
	}
	for _, o := range opts {
		o(&apiCfg)
	}
	srv, err := api.New(apiCfg)
	require.NoError(t, err)
	contract, handler := checked(t, srv)
	ts := httptest.NewServer(handler)
	t.Cleanup(ts.Close)

	// One transport for every client of the test, with room for many idle
	// connections, so 64 workers do not churn through ephemeral ports.
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 90 * time.Second}

	hash, err := srv.HashPassword(adminPassword)
	require.NoError(t, err)
	u, err := db.CreateUser(ctx, events.UserRegistered{Email: adminEmail, FullName: "Ada Admin", IsAdmin: true},
		adminPassword, hash, events.Meta{Actor: events.System("test")})
	require.NoError(t, err)
	admin := client.New(ts.URL, hc)
	_, err = admin.Login(ctx, adminEmail, adminPassword)
	require.NoError(t, err)
	return &bundle{t: t, ctx: ctx, srv: srv, contract: contract, db: db, pool: pool, url: ts.URL, secret: secret, clock: clk,
		admin: admin, adminID: u.ID, http: hc, reg: reg}
}

// newWorker creates a worker through the admin API and logs it in.
func (b *bundle) newWorker(t *testing.T, name string, limit int) *worker {
	t.Helper()
	email := strings.ToLower(name) + "@workers.example.com"
	u, err := b.admin.CreateWorker(b.ctx, client.NewWorker{Email: email, Password: workerPass, FullName: name, MaxConcurrentTasks: limit})
	require.NoError(t, err)
	require.Equal(t, limit, u.MaxConcurrentTasks)
	c := client.New(b.url, b.http)
	_, err = c.Login(b.ctx, email, workerPass)
	require.NoError(t, err)
	return &worker{Client: c, ID: u.ID, Email: email, Limit: limit}
}

const reportSchema = `{"type":"object","properties":{"days":{"type":"integer","minimum":1},
 "tags":{"type":"array","items":{"type":"string"}},"owner":{"type":"object","properties":{"email":{"type":"string","format":"email"}}}},
 "required":["days"]}`

// newType creates a task type with reportSchema.
func (b *bundle) newType(t *testing.T, name string) *events.TaskType {
	t.Helper()
	retries := 2
	tt, err := b.admin.CreateTaskType(b.ctx, client.NewTaskType{Name: name, Label: "Report", SOP: "1. Read\n2. Write",
		ParamSchema: json.RawMessage(reportSchema), MaxRetries: &retries})
	require.NoError(t, err)
	return tt
}

// newTask creates a task through the admin API.
func (b *bundle) newTask(t *testing.T, tt *events.TaskType, title string, prio events.Priority, assignee string) *events.Task {
	t.Helper()
	task, err := b.admin.CreateTask(b.ctx, client.NewTask{Title: title, TaskTypeID: tt.ID, Priority: prio,
		Params: json.RawMessage(`{"days":3}`), AssignedTo: assignee})
	require.NoError(t, err)
	return task
}

// fold reads a task's stream and folds it.
func (b *bundle) fold(t *testing.T, id string) (*events.Task, []events.Envelope) {
	t.Helper()
	evs, err := b.db.Stream(b.ctx, b.pool, id)
	require.NoError(t, err)
	require.NotEmpty(t, evs, "stream of %s", id)
	return events.FoldTask(evs), evs
}

// requireProjectionIsFold checks the worker_tasks row, both as the store
// reads it and as GET task answers, against the fold of the task's events,
// field by field.
func (b *bundle) requireProjectionIsFold(t *testing.T, id string) *events.Task {
	t.Helper()
	folded, _ := b.fold(t, id)
	row, err := b.db.GetTask(b.ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, *folded, *row, "worker_tasks row of %s differs from the fold of its events", id)

	detail, err := b.admin.Task(b.ctx, id)
	require.NoError(t, err)
	want, err := json.Marshal(folded)
	require.NoError(t, err)
	got, err := json.Marshal(detail.Task)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "GET task %s differs from the fold of its events", id)
	return folded
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "report")
	w1 := b.newWorker(t, "Wanda", 2)
	w2 := b.newWorker(t, "Walter", 3)

	// Created in this order; the queue order is priority, then FIFO, with a
	// worker's pre-assigned tasks before everything else.
	lowA := b.newTask(t, tt, "low A", events.PriorityLow, "")
	urgent := b.newTask(t, tt, "urgent", events.PriorityUrgent, "")
	medB := b.newTask(t, tt, "medium B", events.PriorityMedium, "")
	high := b.newTask(t, tt, "high", events.PriorityHigh, "")
	medC := b.newTask(t, tt, "medium C", events.PriorityMedium, "")
	forW2, err := b.admin.CreateTask(ctx, client.NewTask{Title: "low for Walter", TaskTypeID: tt.ID, Priority: events.PriorityLow,
		Params: json.RawMessage(`{"days":9,"tags":["client"]}`), AssignedTo: w2.ID, Reason: "knows the client"})
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, forW2.Status)
	require.Equal(t, &w2.ID, forW2.AssignedTo)

	page, err := b.admin.Tasks(ctx, client.TaskQuery{Unassigned: true})
	require.NoError(t, err)
	require.Equal(t, 5, page.QueueDepth)

	claim := func(w *worker, want *events.Task) *store.TaskWithType {
		t.Helper()
		got, err := w.Claim(ctx)
		require.NoError(t, err)
		if want == nil {
			require.Nil(t, got, "%s should get nothing", w.Email)
			return nil
		}
		require.NotNil(t, got, "%s should get %q", w.Email, want.Title)
		require.Equal(t, want.ID, got.ID, "%s got %q, want %q", w.Email, got.Title, want.Title)
		require.Equal(t, events.StatusInProgress, got.Status)
		require.Equal(t, &w.ID, got.AssignedTo)
		// The claim carries the type a worker needs to do the work.
		require.NotNil(t, got.TaskType)
		require.Equal(t, tt.ID, got.TaskType.ID)
		require.Equal(t, "1. Read\n2. Write", got.TaskType.SOP)
		require.Equal(t, 2, got.TaskType.MaxRetries)
		require.JSONEq(t, reportSchema, string(got.TaskType.ParamSchema))
		return got
	}

	claim(w1, urgent)
	claim(w1, high)
	claim(w1, nil) // at its limit of 2
	claim(w2, forW2)
	claim(w2, medB)
	claim(w2, medC)
	claim(w2, nil) // at its limit of 3

	// Wanda works the urgent task to completion and fails the high one.
	require.NoError(t, w1.Heartbeat(ctx, client.Heartbeat{Status: "working", CurrentTaskID: urgent.ID, Metadata: map[string]any{"pid": 42}}))
	require.NoError(t, w1.PostUpdate(ctx, urgent.ID, "started"))
	require.NoError(t, w1.PostUpdate(ctx, urgent.ID, "half way"))
	require.NoError(t, w1.PostResult(ctx, urgent.ID, map[string]any{"pages": 3, "url": "https://example.com/r"}))
	done, err := w1.Complete(ctx, urgent.ID)
	require.NoError(t, err)
	require.Equal(t, events.StatusCompleted, done.Status)
	require.NoError(t, w1.PostUpdate(ctx, high.ID, "source is down"))
	failed, err := w1.Fail(ctx, high.ID, "source unavailable")
	require.NoError(t, err)
	require.Equal(t, events.StatusFailed, failed.Status)
	require.Equal(t, "source unavailable", *failed.FailureReason)
	require.Equal(t, events.FailureError, *failed.FailureKind)

	// Walter gives his pre-assigned task back and finishes the others.
	released, err := w2.Release(ctx, forW2.ID, "not my client after all")
	require.NoError(t, err)
	require.Equal(t, events.StatusPending, released.Status)
	require.Nil(t, released.AssignedTo)
	require.NoError(t, w2.PostResult(ctx, medB.ID, []string{"a", "b"}))
	_, err = w2.Complete(ctx, medB.ID)
	require.NoError(t, err)
	_, err = w2.Complete(ctx, medC.ID)
	require.NoError(t, err)

	// The released task is back in the pool, behind the older low one.
	claim(w1, lowA)
	claim(w1, forW2)
	_, err = w1.Complete(ctx, lowA.ID)
	require.NoError(t, err)
	require.NoError(t, w1.PostResult(ctx, forW2.ID, "done by Wanda"))
	_, err = w1.Complete(ctx, forW2.ID)
	require.NoError(t, err)
	claim(w1, nil)
	claim(w2, nil)

	// Every task's events tell its whole story, with who did each step.
	admin := events.Actor{Kind: events.ActorAdmin, ID: b.adminID}
	as := func(w *worker) events.Actor { return events.Actor{Kind: events.ActorWorker, ID: w.ID} }
	type step struct {
		typ   string
		actor events.Actor
	}
	stories := map[string][]step{
		lowA.ID:   {{"task.created", admin}, {"task.claimed", as(w1)}, {"task.completed", as(w1)}},
		urgent.ID: {{"task.created", admin}, {"task.claimed", as(w1)}, {"task.update_posted", as(w1)}, {"task.update_posted", as(w1)}, {"task.result_posted", as(w1)}, {"task.completed", as(w1)}},
		medB.ID:   {{"task.created", admin}, {"task.claimed", as(w2)}, {"task.result_posted", as(w2)}, {"task.completed", as(w2)}},
		high.ID:   {{"task.created", admin}, {"task.claimed", as(w1)}, {"task.update_posted", as(w1)}, {"task.failed", as(w1)}},
		medC.ID:   {{"task.created", admin}, {"task.claimed", as(w2)}, {"task.completed", as(w2)}},
		forW2.ID: {{"task.created", admin}, {"task.assigned", admin}, {"task.claimed", as(w2)}, {"task.released", as(w2)},
			{"task.claimed", as(w1)}, {"task.result_posted", as(w1)}, {"task.completed", as(w1)}},
	}
	for id, want := range stories {
		evs, err := b.admin.TaskEvents(ctx, id)
		require.NoError(t, err)
		got := make([]step, len(evs))
		for i, e := range evs {
			got[i] = step{e.Type, e.Meta.Actor}
			require.Equal(t, i+1, e.Version, "versions of %s", id)
			require.Equal(t, id, e.StreamID)
			require.Equal(t, events.StreamTask, e.StreamType)
			require.NotEmpty(t, e.Meta.RequestID, "%s of %s has no request id", e.Type, id)
			if i > 0 {
				require.False(t, e.OccurredAt.Before(evs[i-1].OccurredAt), "events of %s out of time order", id)
				require.Greater(t, e.Seq, evs[i-1].Seq)
			}
			if e.Meta.Actor.Kind == events.ActorWorker && e.Type != "task.update_posted" {
				var data struct {
					WorkerID string `json:"worker_id"`
				}
				require.NoError(t, json.Unmarshal(e.Data, &data))
				require.Equal(t, e.Meta.Actor.ID, data.WorkerID, "%s names another worker than its actor", e.Type)
			}
		}
		require.Equal(t, want, got, "story of %s", id)
		b.requireProjectionIsFold(t, id)
	}

	// The failure says why; the release and the assignment say why too.
	evs, err := b.admin.TaskEvents(ctx, high.ID)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"worker_id":%q,"kind":"error","reason":"source unavailable"}`, w1.ID), string(evs[3].Data))

	detail, err := b.admin.Task(ctx, forW2.ID)
	require.NoError(t, err)
	kinds := []string{}
	for _, a := range detail.Assignments {
		kinds = append(kinds, a.Kind+":"+a.WorkerID)
	}
	require.Equal(t, []string{"assigned:" + w2.ID, "claimed:" + w2.ID, "released:" + w2.ID, "claimed:" + w1.ID}, kinds)
	require.Equal(t, "knows the client", detail.Assignments[0].Reason)
	require.Equal(t, &b.adminID, detail.Assignments[0].AssignedBy)
	require.Equal(t, "not my client after all", detail.Assignments[2].Reason)
	require.JSONEq(t, `"done by Wanda"`, string(detail.Result))

	detail, err = b.admin.Task(ctx, urgent.ID)
	require.NoError(t, err)
	require.Len(t, detail.Updates, 2)
	require.Equal(t, "started", detail.Updates[0].Message)
	require.Equal(t, "half way", detail.Updates[1].Message)
	require.Equal(t, &w1.ID, detail.Updates[0].AuthorID)
	require.JSONEq(t, `{"pages":3,"url":"https://example.com/r"}`, string(detail.Result))

	// A worker sees its own tasks, not others'.
	mine, err := w2.MyTasks(ctx, true)
	require.NoError(t, err)
	ids := []string{}
	for _, m := range mine {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	wantIDs := []string{medB.ID, medC.ID}
	sort.Strings(wantIDs)
	require.Equal(t, wantIDs, ids)
	active, err := w1.MyTasks(ctx, false)
	require.NoError(t, err)
	require.Empty(t, active)

	st, err := b.admin.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"blocked": 0.0, "pending": 0.0, "in_progress": 0.0, "completed": 5.0, "failed": 1.0, "cancelled": 0.0}, st["by_status"])
	require.Equal(t, 0.0, st["queue_depth"])
	require.Equal(t, 1.0, st["workers_online"], "Wanda sent a heartbeat, Walter did not")
}

// TestAdminCommandsProjectTheFold edits, assigns and cancels through the
// admin routes and checks the rows against the fold after each step.
func TestAdminCommandsProjectTheFold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "triage")
	w := b.newWorker(t, "Wes", 1)
	task := b.newTask(t, tt, "triage me", events.PriorityLow, "")

	title, prio := "triage me first", events.PriorityUrgent
	edited, err := b.admin.EditTask(ctx, task.ID, client.TaskEdit{Title: &title, Priority: &prio, Params: json.RawMessage(`{"days":5}`)})
	require.NoError(t, err)
	require.Equal(t, title, edited.Title)
	require.JSONEq(t, `{"days":5}`, string(edited.Params))
	b.requireProjectionIsFold(t, task.ID)

	_, err = b.admin.AssignTask(ctx, task.ID, w.ID, "on call")
	require.NoError(t, err)
	b.requireProjectionIsFold(t, task.ID)

	got, err := w.MyTask(ctx, task.ID)
	require.NoError(t, err, "an assigned task is visible to its worker before the claim")
	require.Equal(t, tt.ID, got.TaskType.ID)

	cancelled, err := b.admin.CancelTask(ctx, task.ID, "duplicate")
	require.NoError(t, err)
	require.Equal(t, events.StatusCancelled, cancelled.Status)
	require.NotNil(t, cancelled.CompletedAt)
	folded := b.requireProjectionIsFold(t, task.ID)
	require.Equal(t, 4, folded.Version)

	claimed, err := w.Claim(ctx)
	require.NoError(t, err)
	require.Nil(t, claimed, "a cancelled task is not claimable")
}

func TestClaimRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "chore")

	t.Run("max_concurrent_tasks", func(t *testing.T) {
		w := b.newWorker(t, "Cap", 2)
		var tasks []*events.Task
		for i := range 3 {
			tasks = append(tasks, b.newTask(t, tt, fmt.Sprintf("cap %d", i), events.PriorityHigh, ""))
		}
		first, err := w.Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, first)
		second, err := w.Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, second)
		third, err := w.Claim(ctx)
		require.NoError(t, err)
		require.Nil(t, third, "the third claim of a worker with max_concurrent_tasks 2")

		// Finishing one frees a slot.
		_, err = w.Complete(ctx, first.ID)
		require.NoError(t, err)
		third, err = w.Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, third)
		require.Equal(t, tasks[2].ID, third.ID)
		for _, id := range []string{second.ID, third.ID} {
			_, err = w.Complete(ctx, id)
			require.NoError(t, err)
		}
	})

	t.Run("concurrent claims of one worker respect its limit", func(t *testing.T) {
		w := b.newWorker(t, "Greedy", 2)
		for i := range 10 {
			b.newTask(t, tt, fmt.Sprintf("greedy %d", i), events.PriorityLow, "")
		}
		var wg sync.WaitGroup
		var claimed atomic.Int32
		errs := make(chan error, 10)
		for range 10 {
			wg.Go(func() {
				got, err := w.Claim(ctx)
				if err != nil {
					errs <- err
				}
				if got != nil {
					claimed.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, 2, claimed.Load())
		var held int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE assigned_to = $1 AND status = 'in_progress'`, w.ID).Scan(&held))
		require.Equal(t, 2, held)
		cancelAll(t, b)
	})

	t.Run("pre-assigned tasks go only to their worker", func(t *testing.T) {
		owner := b.newWorker(t, "Owner", 1)
		stranger := b.newWorker(t, "Stranger", 1)
		mine := b.newTask(t, tt, "for the owner", events.PriorityUrgent, owner.ID)
		got, err := stranger.Claim(ctx)
		require.NoError(t, err)
		require.Nil(t, got, "the only pending task is pre-assigned to someone else")

		// Assigning an existing pool task also reserves it.
		later := b.newTask(t, tt, "assigned later", events.PriorityUrgent, "")
		_, err = b.admin.AssignTask(ctx, later.ID, owner.ID, "owner knows this")
		require.NoError(t, err)
		got, err = stranger.Claim(ctx)
		require.NoError(t, err)
		require.Nil(t, got)

		got, err = owner.Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, mine.ID, got.ID)
		_, err = owner.Complete(ctx, mine.ID)
		require.NoError(t, err)
		got, err = owner.Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, later.ID, got.ID)
		_, err = owner.Complete(ctx, later.ID)
		require.NoError(t, err)
		b.requireProjectionIsFold(t, mine.ID)
		b.requireProjectionIsFold(t, later.ID)
	})

	t.Run("available_at in the future is not claimable", func(t *testing.T) {
		w := b.newWorker(t, "Early", 1)
		at := b.db.Now().Add(time.Hour)
		task, err := b.db.CreateTask(ctx, b.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
			Title: "backed off retry", Params: json.RawMessage(`{"days":1}`), AvailableAt: &at,
		}}, events.Meta{Actor: events.System("test")})
		require.NoError(t, err)
		require.Equal(t, at, task.AvailableAt)
		got, err := w.Claim(ctx)
		require.NoError(t, err)
		require.Nil(t, got, "available in an hour")

		b.clock.Advance(time.Hour + time.Second)
		got, err = w.Claim(ctx)
		require.NoError(t, err)
		require.Nil(t, got, "the time came, but no timer made it due yet")
		due, err := b.db.MakeDue(ctx, 10) // what each instance's due timer does
		require.NoError(t, err)
		require.Len(t, due, 1)
		got, err = w.Claim(ctx)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, task.ID, got.ID)
		require.Equal(t, at, got.AvailableAt)
		_, err = w.Complete(ctx, task.ID)
		require.NoError(t, err)
		b.requireProjectionIsFold(t, task.ID)
	})
}

// cancelAll cancels every task not yet ended, so subtests sharing a database
// start from an empty queue.
func cancelAll(t *testing.T, b *bundle) {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id::text FROM worker_tasks WHERE status IN ('pending', 'in_progress')`)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	for _, id := range ids {
		_, err := b.admin.CancelTask(b.ctx, id, "cleanup")
		require.NoError(t, err)
	}
}

func TestOpenAPIListsExactlyTheRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := b.http.Get(b.url + "/api/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "openapi version %q", doc.OpenAPI)

	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	registered := map[string]bool{}
	for _, r := range b.srv.Echo().Routes() {
		if strings.HasPrefix(r.Method, "echo_") { // echo's own (route not found, any)
			continue
		}
		path := r.Path
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, ":") {
				path = strings.Replace(path, seg, "{"+seg[1:]+"}", 1)
			}
		}
		registered[r.Method+" "+path] = true
	}
	require.Equal(t, sortedKeys(registered), sortedKeys(documented))
	require.Contains(t, registered, "POST /api/v1/worker/tasks/claim")
	require.Contains(t, registered, "GET /api/v1/admin/workers/tasks/{id}/events")
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestOperationsEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := b.http.Get(b.url + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		require.Contains(t, string(body), `"success":true`)
	}

	// A clock far from the database's: not ready, and /readyz says which check.
	readyz := func() (int, string) {
		t.Helper()
		resp, err := b.http.Get(b.url + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	b.clock.Advance(-(store.MaxClockOffset + time.Minute))
	code, body := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"clock":"off"`)
	b.clock.Advance(store.MaxClockOffset + time.Minute)
	code, body = readyz()
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"clock":"ok"`)

	tt := b.newType(t, "metered")
	w := b.newWorker(t, "Meter", 1)
	task := b.newTask(t, tt, "count me", events.PriorityMedium, "")
	got, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Equal(t, task.ID, got.ID)
	empty, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Nil(t, empty)
	_, err = w.Complete(b.ctx, task.ID)
	require.NoError(t, err)

	resp, err := b.http.Get(b.url + "/metrics")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text := string(raw)
	for _, want := range []string{
		`taskservice_claims_total{outcome="claimed"} 1`,
		`taskservice_claims_total{outcome="empty"} 1`,
		`taskservice_claim_duration_seconds_count 2`,
		`taskservice_events_appended_total{type="task.claimed"} 1`,
		`taskservice_events_appended_total{type="task.completed"} 1`,
		`taskservice_events_appended_total{type="task.created"} 1`,
		`taskservice_http_requests_total{method="POST",route="/api/v1/worker/tasks/claim",status="200"} 2`,
		`taskservice_http_request_duration_seconds_bucket{method="POST",route="/api/v1/worker/tasks/claim",le="+Inf"} 2`,
		`go_goroutines `,
	} {
		require.Contains(t, text, want)
	}
}

// TestAdminQueries pages through the task list by keyset with each filter,
// and checks the type's schema and archive rules as task creation sees them.
func TestAdminQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := b.ctx
	tt := b.newType(t, "listed")
	other := b.newType(t, "other")
	w := b.newWorker(t, "Lister", 3)

	var all []*events.Task
	prios := []events.Priority{events.PriorityLow, events.PriorityHigh, events.PriorityMedium}
	for i := range 7 {
		all = append(all, b.newTask(t, tt, fmt.Sprintf("listed %d", i), prios[i%3], ""))
	}
	reserved := b.newTask(t, other, "reserved", events.PriorityUrgent, w.ID)
	all = append(all, reserved)
	claimed, err := w.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, reserved.ID, claimed.ID)
	claimed, err = w.Claim(ctx) // the oldest high one
	require.NoError(t, err)
	require.Equal(t, all[1].ID, claimed.ID)
	_, err = w.Complete(ctx, claimed.ID)
	require.NoError(t, err)

	// pages follows next_cursor to the end and returns the ids in order.
	pages := func(q client.TaskQuery) ([]string, int) {
		t.Helper()
		var ids []string
		depth := -1
		for n := 0; ; n++ {
			require.Less(t, n, 20, "paging does not end")
			page, err := b.admin.Tasks(ctx, q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Tasks), q.Limit)
			for _, task := range page.Tasks {
				ids = append(ids, task.ID)
			}
			depth = page.QueueDepth
			if page.NextCursor == "" {
				return ids, depth
			}
			q.After = page.NextCursor
		}
	}
	// want lists the ids of tasks matching keep, newest first.
	want := func(keep func(*events.Task) bool) []string {
		var ids []string
		for i := len(all) - 1; i >= 0; i-- {
			cur, err := b.db.GetTask(ctx, b.pool, all[i].ID)
			require.NoError(t, err)
			if keep(cur) {
				ids = append(ids, cur.ID)
			}
		}
		return ids
	}
	everything, depth := pages(client.TaskQuery{Limit: 2})
	require.Equal(t, want(func(*events.Task) bool { return true }), everything)
	require.Equal(t, 6, depth, "six pending tasks nobody holds")

	cases := []struct {
		name string
		q    client.TaskQuery
		keep func(*events.Task) bool
	}{
		{"status", client.TaskQuery{Status: "pending"}, func(t *events.Task) bool { return t.Status == events.StatusPending }},
		{"priority", client.TaskQuery{Priority: "low"}, func(t *events.Task) bool { return t.Priority == events.PriorityLow }},
		{"type", client.TaskQuery{TaskTypeID: other.ID}, func(t *events.Task) bool { return t.TaskTypeID == other.ID }},
		{"assigned_to", client.TaskQuery{AssignedTo: w.ID}, func(t *events.Task) bool { return t.HeldBy(w.ID) }},
		{"unassigned", client.TaskQuery{Unassigned: true}, func(t *events.Task) bool { return t.Status == events.StatusPending && t.AssignedTo == nil }},
		{"status and priority", client.TaskQuery{Status: "completed", Priority: "high"}, func(t *events.Task) bool {
			return t.Status == events.StatusCompleted && t.Priority == events.PriorityHigh
		}},
		{"retries", client.TaskQuery{Retries: true}, func(t *events.Task) bool { return t.RetryCount > 0 }},
	}
	for _, c := range cases {
		c.q.Limit = 2
		got, _ := pages(c.q)
		require.Equal(t, want(c.keep), got, c.name)
	}

	capacity, err := b.admin.Capacity(ctx, client.AccountQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, capacity.Workers, 1)
	require.Equal(t, 3, capacity.TotalSlots)
	require.Equal(t, 1, capacity.UsedSlots)
	require.Equal(t, 2, capacity.AvailableSlots)
	require.Equal(t, 6, capacity.QueueDepth)
	workers, err := b.admin.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.Equal(t, 1, workers[0].InProgressCount)
	require.Equal(t, 1, workers[0].CompletedToday)

	// A new schema applies to new tasks at once; an archived type takes none.
	retries := 1
	_, err = b.admin.UpdateTaskType(ctx, tt.ID, client.NewTaskType{Name: "listed", MaxRetries: &retries,
		ParamSchema: json.RawMessage(`{"type":"object","properties":{"days":{"type":"integer","maximum":2}},"required":["days"]}`)})
	require.NoError(t, err)
	_, err = b.admin.CreateTask(ctx, client.NewTask{Title: "too long", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":3}`)})
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 400, apiErr.Status)
	require.Equal(t, "params.days", apiErr.Field)
	_, err = b.admin.CreateTask(ctx, client.NewTask{Title: "short", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":2}`)})
	require.NoError(t, err)
	_, err = b.admin.UpdateTaskType(ctx, tt.ID, client.NewTaskType{Name: "renamed"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "name", apiErr.Field)

	require.NoError(t, b.admin.Do(ctx, http.MethodPost, "/api/v1/admin/workers/task-types/"+other.ID+"/archive", nil, nil))
	_, err = b.admin.CreateTask(ctx, client.NewTask{Title: "archived", TaskTypeID: other.ID})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 409, apiErr.Status, "a state answer, not one about the request's shape")
	require.Equal(t, "task_type_id", apiErr.Field)
	listed, err := b.admin.TaskTypes(ctx, false)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	listed, err = b.admin.TaskTypes(ctx, true)
	require.NoError(t, err)
	require.Len(t, listed, 2)
}
