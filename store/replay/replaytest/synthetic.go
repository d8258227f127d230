// Package replaytest writes synthetic but valid event logs for replay's
// tests and benchmarks: users, task types and tasks whose streams follow
// the task state machine, interleaved as a live system would write them.
// It writes task_events only; replay.Rebuild makes the projections.
package replaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/events"
)

// Config shapes a synthetic log.
type Config struct {
	Events  int    // how many events to write (at least)
	Workers int    // default 50
	Types   int    // default 5
	Active  int    // tasks in flight at once, interleaved (default 2000)
	Seed    uint64 // random seed
	// Start is the first event's time (default 2026-01-01T00:00:00Z); each
	// event is Step (default a millisecond) after the previous one. A Step
	// of a second spreads a million tasks over about two months, as a fleet
	// of 50 workers would, so that "today" holds one day's work.
	Start time.Time
	Step  time.Duration
	// Backlog is how many tasks to create after Events, unassigned and
	// never claimed: a pending backlog at the end of the log.
	Backlog int
}

type stream struct {
	id      string
	version int
	steps   []step
	worker  string // the worker whose slot the task holds until its last step
}

type step struct {
	p     events.Payload
	actor events.Actor
	spawn *stream // a retry, which starts once this step is written
}

type gen struct {
	cfg     Config
	rnd     *rand.Rand
	at      time.Time
	admin   string
	workers []string
	types   []string
	active  []*stream
	pending []*stream // streams to start (users, types, retries)
	written int
	tasks   int
	backlog int            // backlog tasks written
	held    map[string]int // worker -> tasks it holds or will claim (at most its cap)
	caps    map[string]int
}

// Seed writes the log with one COPY and returns how many events it wrote.
func Seed(ctx context.Context, pool *pgxpool.Pool, cfg Config) (int, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 50
	}
	if cfg.Types <= 0 {
		cfg.Types = 5
	}
	if cfg.Active <= 0 {
		cfg.Active = 2000
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if cfg.Step <= 0 {
		cfg.Step = time.Millisecond
	}
	g := &gen{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), at: cfg.Start,
		held: map[string]int{}, caps: map[string]int{}}
	g.setup()
	// A COPY (a transaction) per txEvents events: a real log is written by
	// many transactions, and the planner's estimates of a read from a
	// position ((tx_id, seq) > ...) go by tx_id; one transaction for the
	// whole log made every such read look empty.
	var total int64
	for done := false; !done; {
		left := txEvents
		n, err := pool.CopyFrom(ctx, pgx.Identifier{"task_events"},
			[]string{"stream_type", "stream_id", "version", "type", "schema_version", "data", "meta", "occurred_at"},
			pgx.CopyFromFunc(func() ([]any, error) {
				if left == 0 {
					return nil, nil
				}
				row, err := g.next()
				if row == nil {
					done = true
				}
				left--
				return row, err
			}))
		total += n
		if err != nil {
			return int(total), err
		}
		if n == 0 {
			break
		}
	}
	// The log was written behind the store's back: mark its days
	// (migration 053), as the migration marks a log it finds.
	_, err := pool.Exec(ctx, `SELECT log_marks_seed()`)
	return int(total), err
}

// txEvents is how many events each transaction of Seed writes.
const txEvents = 1000

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// setup queues the users and types, which are written first.
func (g *gen) setup() {
	g.admin = newID()
	admin := events.Actor{Kind: events.ActorAdmin, ID: g.admin}
	g.pending = append(g.pending, &stream{id: g.admin, steps: []step{{events.UserRegistered{
		Email: "admin@example.com", FullName: "Ada Admin", IsAdmin: true, MaxConcurrentTasks: 1}, events.System("bootstrap"), nil}}})
	for i := range g.cfg.Workers {
		id := newID()
		g.workers = append(g.workers, id)
		g.caps[id] = 1 + i%4
		g.pending = append(g.pending, &stream{id: id, steps: []step{
			{events.UserRegistered{Email: fmt.Sprintf("worker%d@example.com", i), FullName: fmt.Sprintf("Worker %d", i),
				IsWorker: true, MaxConcurrentTasks: g.caps[id]}, admin, nil},
			{events.WorkerWentOnline{}, events.Actor{Kind: events.ActorWorker, ID: id}, nil},
		}})
	}
	for i := range g.cfg.Types {
		id := newID()
		g.types = append(g.types, id)
		spec := events.TaskTypeSpec{Name: fmt.Sprintf("type_%d", i), Label: fmt.Sprintf("Type %d", i),
			SOP: "1. Read the task.\n2. Do it.\n3. Report.", ParamSchema: json.RawMessage(`{"type": "object"}`), MaxRetries: 3}
		steps := []step{{events.TaskTypeCreated{TaskTypeSpec: spec}, admin, nil}}
		if i%2 == 1 {
			spec.Description = "updated"
			steps = append(steps, step{events.TaskTypeUpdated{TaskTypeSpec: spec}, admin, nil})
		}
		g.pending = append(g.pending, &stream{id: id, steps: steps})
	}
}

// next yields the next event row: pending streams first, then a random
// step of a random active task, refilling the active set as tasks end.
func (g *gen) next() ([]any, error) {
	if g.written >= g.cfg.Events && len(g.pending) == 0 {
		if g.backlog >= g.cfg.Backlog {
			return nil, nil
		}
		g.backlog++
		g.pending = append(g.pending, g.backlogTask())
	}
	var s *stream
	if len(g.pending) > 0 {
		s = g.pending[0]
	} else {
		for len(g.active) < g.cfg.Active {
			g.active = append(g.active, g.newTask(nil, 0))
		}
		s = g.active[g.rnd.IntN(len(g.active))]
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	s.version++
	if len(s.steps) == 0 {
		g.finish(s)
	}
	if st.spawn != nil {
		g.active = append(g.active, st.spawn)
	}
	g.written++
	g.at = g.at.Add(g.cfg.Step)
	streamType := events.StreamTask
	switch st.p.(type) {
	case events.UserRegistered, events.WorkerWentOnline, events.WorkerWentOffline:
		streamType = events.StreamUser
	case events.TaskTypeCreated, events.TaskTypeUpdated, events.TaskTypeArchived:
		streamType = events.StreamTaskType
	}
	data, err := json.Marshal(st.p)
	if err != nil {
		return nil, err
	}
	meta, err := json.Marshal(events.Meta{Actor: st.actor, RequestID: "synthetic"})
	if err != nil {
		return nil, err
	}
	return []any{streamType, s.id, s.version, st.p.EventType(), 1, string(data), string(meta), g.at}, nil
}

// finish drops a stream that has no more steps from where it was.
func (g *gen) finish(s *stream) {
	if s.worker != "" {
		g.held[s.worker]--
	}
	if len(g.pending) > 0 && g.pending[0] == s {
		g.pending = g.pending[1:]
		return
	}
	for i, a := range g.active {
		if a == s {
			g.active[i] = g.active[len(g.active)-1]
			g.active = g.active[:len(g.active)-1]
			return
		}
	}
}

// freeWorker picks a random worker with a free slot, "" when all are busy.
func (g *gen) freeWorker() string {
	start := g.rnd.IntN(len(g.workers))
	for i := range g.workers {
		w := g.workers[(start+i)%len(g.workers)]
		if g.held[w] < g.caps[w] {
			return w
		}
	}
	return ""
}

// newTask plans a whole task lifecycle; a failed task may plan its retry,
// which starts when the failure has been written.
func (g *gen) newTask(parent *stream, retry int) *stream {
	g.tasks++
	id := newID()
	s := &stream{id: id}
	admin := events.Actor{Kind: events.ActorAdmin, ID: g.admin}
	w := g.freeWorker()
	worker := events.Actor{Kind: events.ActorWorker, ID: w}
	created := events.TaskCreated{
		Title:       fmt.Sprintf("Synthetic task %d", g.tasks),
		Description: "Generated for replay benchmarks.",
		TaskTypeID:  g.types[g.rnd.IntN(len(g.types))],
		Params:      json.RawMessage(fmt.Sprintf(`{"n": %d, "path": "src/file_%d.go"}`, g.tasks, g.tasks%97)),
		Priority:    []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}[g.rnd.IntN(4)],
		RetryCount:  retry,
		CreatedBy:   g.admin,
	}
	actor := admin
	if parent != nil {
		created.ParentTaskID = parent.id
		created.Title += fmt.Sprintf(" (retry %d)", retry)
		actor = events.System("retry")
	}
	add := func(p events.Payload, a events.Actor) { s.steps = append(s.steps, step{p: p, actor: a}) }
	add(created, actor)
	if w == "" { // every worker is busy: the task waits in the queue
		return s
	}
	if g.rnd.IntN(10) == 0 {
		add(events.TaskAssigned{WorkerID: w, By: g.admin, Reason: "knows this code"}, admin)
	}
	switch r := g.rnd.IntN(100); {
	case r < 5:
		add(events.TaskCancelled{By: g.admin, Reason: "not needed"}, admin)
		return s
	case r < 10:
		return s // still pending
	case r < 15:
		add(events.TaskClaimed{WorkerID: w}, worker)
		add(events.TaskReleased{WorkerID: w, Reason: "out of time"}, worker)
	case r < 18:
		add(events.TaskEdited{Title: created.Title + " (edited)", Description: "edited", Params: created.Params, Priority: events.PriorityHigh}, admin)
	}
	// The task holds a slot of w from here to its last step (a task the log
	// ends in the middle of holds it for good), so no worker ever holds
	// more than its max_concurrent_tasks.
	s.worker = w
	g.held[w]++
	add(events.TaskClaimed{WorkerID: w}, worker)
	for i := range g.rnd.IntN(4) {
		add(events.TaskUpdatePosted{UpdateID: newID(), AuthorID: w, Message: fmt.Sprintf("step %d done: read the code, ran the tests", i+1)}, worker)
	}
	switch r := g.rnd.IntN(100); {
	case r < 15:
		add(events.TaskFailed{WorkerID: w, Kind: events.FailureError, Reason: "tests failed: exit status 1"}, worker)
		system := events.System("retry")
		switch {
		case retry >= 3:
			add(events.TaskRetriesExhausted{Attempts: retry + 1, MaxRetries: 3}, system)
		case g.rnd.IntN(5) == 0:
			add(events.TaskRetrySkipped{Reason: "looks permanent"}, system)
		default:
			child := g.newTask(s, retry+1)
			s.steps = append(s.steps, step{p: events.TaskRetried{RetryTaskID: child.id, RetryNumber: retry + 1, MaxRetries: 3},
				actor: system, spawn: child})
		}
	default:
		add(events.TaskResultPosted{WorkerID: w, Result: json.RawMessage(`{"ok": true, "files_changed": 3}`)}, worker)
		add(events.TaskCompleted{WorkerID: w}, worker)
	}
	return s
}

// backlogTask is a task created and left pending, for nobody in particular.
func (g *gen) backlogTask() *stream {
	g.tasks++
	return &stream{id: newID(), steps: []step{{p: events.TaskCreated{
		Title:       fmt.Sprintf("Synthetic backlog task %d", g.tasks),
		Description: "Generated for the backlog of scale benchmarks.",
		TaskTypeID:  g.types[g.rnd.IntN(len(g.types))],
		Params:      json.RawMessage(fmt.Sprintf(`{"n": %d, "path": "src/file_%d.go"}`, g.tasks, g.tasks%97)),
		Priority:    []events.Priority{events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow}[g.rnd.IntN(4)],
		CreatedBy:   g.admin,
	}, actor: events.Actor{Kind: events.ActorAdmin, ID: g.admin}}}}
}
