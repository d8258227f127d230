package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
)

// Workflows across three real instances (DESIGN §13): a generated graph of
// 1,000 tasks (fan-out, fan-in, diamonds) worked by 64 long-polling
// workers with random failures and retries. From the events: no task is
// claimed before every dependency's chain completed; every task ends as
// its dependencies say (completed, cancelled with dependency_failed, or
// blocked waiting for an admin); nothing is lost; replay verifies clean.
func TestWorkflowDAGAcrossInstances(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	retries := 1
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "step", Label: "Step", SOP: "Do the step.",
		ParamSchema: json.RawMessage(`{"type":"object"}`), MaxRetries: &retries})
	require.NoError(t, err)
	badWorkflowInput(t, c, tt.ID)

	graph, doomed := generateDAG(1000, rand.New(rand.NewPCG(7, 23)))
	items := make([]client.NewWorkflowTask, len(graph))
	for i, n := range graph {
		items[i] = client.NewWorkflowTask{Ref: n.ref, Title: "step " + n.ref, TaskTypeID: tt.ID, DependsOn: n.deps, OnDependencyFailure: n.onFailure}
	}
	start := time.Now()
	wf, err := c.admin.CreateWorkflow(c.ctx, client.NewWorkflow{Name: "generated", Tasks: items})
	require.NoError(t, err)
	require.Equal(t, 1000, wf.Progress.Total)
	t.Logf("created 1,000 tasks in %s", time.Since(start).Round(time.Millisecond))

	// Workers fail every attempt of the doomed refs and 3% of the others
	// at random; the type retries once.
	ctx, stop := context.WithCancel(c.ctx)
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(1, 2))
	fails := func(ref string) bool {
		if doomed[ref] {
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		return rnd.Float64() < 0.03
	}
	var wg sync.WaitGroup
	for i := range 64 {
		w := c.worker(fmt.Sprintf("dag%d", i), 2)
		cl := w.clients[i%len(w.clients)]
		wg.Go(func() {
			for ctx.Err() == nil {
				tasks, err := cl.ClaimMany(ctx, 2, 5*time.Second)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("worker %d: claim: %v", i, err)
					}
					return
				}
				var done []client.Finish
				for _, task := range tasks {
					f := client.Finish{ID: task.ID, Status: events.StatusCompleted, Result: json.RawMessage(fmt.Sprintf(`{"ref":%q}`, *task.Ref))}
					if fails(*task.Ref) {
						f = client.Finish{ID: task.ID, Status: events.StatusFailed, Reason: "injected failure"}
					}
					done = append(done, f)
				}
				if len(done) > 0 {
					if _, err := cl.FinishMany(context.WithoutCancel(ctx), done); err != nil {
						t.Errorf("worker %d: finish: %v", i, err)
						return
					}
				}
			}
		})
	}
	// Done when nothing may run any more: no task pending or in progress,
	// no failure waiting for its retry decision, no cancellation pending.
	c.eventually("the workflow to settle", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE workflow_id = $1 AND
			(status IN ('pending', 'in_progress') OR (status = 'failed' AND retry_outcome IS NULL))`, wf.ID) == 0 &&
			c.count(`SELECT count(*) FROM worker_tasks WHERE workflow_id = $1 AND status = 'blocked' AND deps_left = 0`, wf.ID) == 0
	})
	t.Logf("worked in %s", time.Since(start).Round(time.Millisecond))
	stop()
	wg.Wait()

	checkDAGOutcome(t, c, wf.ID, graph)
	rep, err := replay.Verify(c.ctx, c.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify: %+v", rep.Differences)
	view, err := c.admin.Workflow(c.ctx, wf.ID)
	require.NoError(t, err)
	t.Logf("workflow %s: %+v", view.Status, view.Progress)
}

type dagNode struct {
	ref       string
	deps      []string
	onFailure string
}

// generateDAG makes n tasks in layers: a root fanning out, layers whose
// tasks depend on one to three tasks of the layers above (fan-in and
// diamonds), a tenth of them waiting on failure, and a sink at the end.
// doomed are refs that fail on every attempt, early enough to cancel a
// good part of the graph.
func generateDAG(n int, rnd *rand.Rand) ([]dagNode, map[string]bool) {
	nodes := []dagNode{{ref: "root"}}
	var prev []string
	var layer []string
	for i := 1; i < n-1; i++ {
		ref := fmt.Sprintf("t%03d", i)
		if len(layer) == 0 && len(prev) == 0 {
			nodes = append(nodes, dagNode{ref: ref, deps: []string{"root"}})
			layer = append(layer, ref)
			continue
		}
		if len(layer) == 100 {
			prev, layer = layer, nil
		}
		parents := prev
		if parents == nil {
			parents = []string{"root"}
		}
		k := 1 + rnd.IntN(3)
		var deps []string
		for range k {
			d := parents[rnd.IntN(len(parents))]
			if !slices.Contains(deps, d) {
				deps = append(deps, d)
			}
		}
		nd := dagNode{ref: ref, deps: deps}
		if rnd.IntN(10) == 0 {
			nd.onFailure = events.OnDependencyFailureWait
		}
		nodes = append(nodes, nd)
		layer = append(layer, ref)
	}
	nodes = append(nodes, dagNode{ref: "sink", deps: layer[:min(len(layer), 50)]})
	return nodes, map[string]bool{"t150": true, "t420": true, "t777": true}
}

// dagTask is a workflow task read back with its events' order.
type dagTask struct {
	id, ref, parent, status, outcome, onFailure string
	deps                                        []string
	claims, completedSeq                        []int64
	cancelledBecause                            string
}

// checkDAGOutcome checks the workflow's end state and its events.
func checkDAGOutcome(t *testing.T, c *cluster, workflowID string, graph []dagNode) {
	t.Helper()
	rows, err := c.pool.Query(c.ctx, `SELECT t.id::text, t.ref, coalesce(t.parent_task_id::text, ''), t.status, coalesce(t.retry_outcome, ''),
		coalesce(t.on_dependency_failure, ''), coalesce(t.depends_on, '{}')::text[],
		coalesce(array_agg(e.seq ORDER BY e.seq) FILTER (WHERE e.type = 'task.claimed'), '{}'),
		coalesce(array_agg(e.seq) FILTER (WHERE e.type = 'task.completed'), '{}'),
		coalesce(max(e.data->>'dependency_id') FILTER (WHERE e.type = 'task.cancelled'), '')
		FROM worker_tasks t JOIN task_events e ON e.stream_id = t.id
		WHERE t.workflow_id = $1 GROUP BY t.id`, workflowID)
	require.NoError(t, err)
	byID := map[string]*dagTask{}
	for rows.Next() {
		d := &dagTask{}
		require.NoError(t, rows.Scan(&d.id, &d.ref, &d.parent, &d.status, &d.outcome, &d.onFailure, &d.deps, &d.claims, &d.completedSeq, &d.cancelledBecause))
		byID[d.id] = d
	}
	require.NoError(t, rows.Err())
	// chain: each original's tasks, original first.
	chain := map[string][]*dagTask{}
	refOf := map[string]string{}
	for _, d := range byID {
		if d.parent == "" {
			refOf[d.id] = d.ref
		}
	}
	for _, d := range byID {
		root := d
		for root.parent != "" {
			root = byID[root.parent]
		}
		chain[root.id] = append(chain[root.id], d)
	}
	require.Len(t, chain, len(graph), "every task of the graph exists once")
	completedAt := func(id string) int64 { // the seq of its chain's completion, 0 if none
		for _, d := range chain[id] {
			if len(d.completedSeq) > 0 {
				return d.completedSeq[0]
			}
		}
		return 0
	}
	latest := func(id string) *dagTask {
		ts := chain[id]
		sort.Slice(ts, func(i, j int) bool { return len(ts[i].parentChain(byID)) < len(ts[j].parentChain(byID)) })
		return ts[len(ts)-1]
	}
	dead := func(id string) bool {
		l := latest(id)
		return l.status == "cancelled" || (l.status == "failed" && l.outcome != "" && l.outcome != "retried")
	}
	outcomes := map[string]int{}
	for id, ts := range chain {
		root := ts[0]
		for _, d := range ts {
			if d.parent == "" {
				root = d
			}
		}
		// No attempt was claimed before every dependency completed.
		for _, d := range ts {
			for _, claim := range d.claims {
				for _, dep := range root.deps {
					done := completedAt(dep)
					require.True(t, done > 0 && done < claim, "%s claimed (seq %d) before its dependency %s completed (seq %d)", d.ref, claim, refOf[dep], done)
				}
			}
		}
		l := latest(id)
		var anyDead, allDone bool = false, true
		for _, dep := range root.deps {
			if dead(dep) {
				anyDead = true
			}
			if completedAt(dep) == 0 {
				allDone = false
			}
		}
		switch l.status {
		case "completed":
			require.True(t, allDone, "%s completed", root.ref)
		case "failed":
			require.True(t, allDone, "%s ran and failed", root.ref)
			require.Contains(t, []string{"exhausted", "skipped"}, l.outcome, "%s: nothing left undecided", root.ref)
		case "cancelled":
			require.Empty(t, root.onFailure, "%s asked to wait, not to be cancelled", root.ref)
			require.NotEmpty(t, l.cancelledBecause, "%s cancelled with dependency_failed", root.ref)
			require.True(t, dead(findRoot(byID, l.cancelledBecause)), "%s cancelled because of a live dependency", root.ref)
		case "blocked":
			require.False(t, allDone, "%s blocked although its dependencies completed", root.ref)
			if anyDead {
				require.Equal(t, events.OnDependencyFailureWait, root.onFailure, "%s should have been cancelled", root.ref)
			}
		default:
			t.Fatalf("%s ended %s", root.ref, l.status)
		}
		if l.status == "blocked" && !anyDead {
			// Waits for a dependency that is itself waiting.
			waiting := false
			for _, dep := range root.deps {
				waiting = waiting || latest(dep).status == "blocked"
			}
			require.True(t, waiting, "%s blocked for no reason", root.ref)
		}
		if anyDead && root.onFailure == "" {
			require.Equal(t, "cancelled", l.status, "%s: a dependency's chain ended, so it is cancelled", root.ref)
		}
		outcomes[l.status]++
	}
	require.Positive(t, outcomes["cancelled"], "the doomed tasks cancelled some of the graph")
	require.Positive(t, outcomes["completed"])
	blocked := c.count(`SELECT count(*) FROM worker_tasks WHERE status = 'blocked'`)
	require.Equal(t, blocked, c.count(`SELECT coalesce(sum(blocked), 0)::int FROM task_counts`), "the blocked counter")
	t.Logf("outcomes: %v", outcomes)
}

func (d *dagTask) parentChain(byID map[string]*dagTask) []string {
	var out []string
	for p := d.parent; p != ""; p = byID[p].parent {
		out = append(out, p)
	}
	return out
}

func findRoot(byID map[string]*dagTask, id string) string {
	d, ok := byID[id]
	for ok && d.parent != "" {
		id = d.parent
		d, ok = byID[id]
	}
	return id
}

// badWorkflowInput: bad graphs and dependencies through the binary, each a
// 400 naming the item, with nothing created.
func badWorkflowInput(t *testing.T, c *cluster, typeID string) {
	t.Helper()
	item := func(ref string, deps ...string) client.NewWorkflowTask {
		return client.NewWorkflowTask{Ref: ref, Title: ref, TaskTypeID: typeID, DependsOn: deps}
	}
	many := make([]client.NewWorkflowTask, 1001)
	for i := range many {
		many[i] = item(fmt.Sprint(i))
	}
	var hundredOne []string
	for i := range 101 {
		hundredOne = append(hundredOne, fmt.Sprint(i))
	}
	before := c.count(`SELECT count(*) FROM task_events`)
	for _, bad := range []struct {
		tasks []client.NewWorkflowTask
		field string
	}{
		{[]client.NewWorkflowTask{item("a", "c"), item("b", "a"), item("c", "b")}, "tasks[0].depends_on"},
		{[]client.NewWorkflowTask{item("a", "a")}, "tasks[0].depends_on[0]"},
		{[]client.NewWorkflowTask{item("a", "ghost")}, "tasks[0].depends_on[0]"},
		{many, "tasks"},
		{append(slices.Clone(many[:101]), item("x", hundredOne...)), "tasks[101].depends_on"},
		{[]client.NewWorkflowTask{item("a"), {Ref: "b", TaskTypeID: typeID}}, "tasks[1].title"},
	} {
		_, err := c.admin.CreateWorkflow(c.ctx, client.NewWorkflow{Name: "bad", Tasks: bad.tasks})
		requireFieldError(t, err, bad.field)
	}
	// A type that is not there: well-formed, and refused as naming nothing.
	_, err := c.admin.CreateWorkflow(c.ctx, client.NewWorkflow{Name: "bad", Tasks: []client.NewWorkflowTask{
		item("a"), {Ref: "b", Title: "b", TaskTypeID: "01a21878-4971-70b3-a4a5-f77e9fcd1c26"}}})
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusUnprocessableEntity, ae.Status, ae.Error())
	require.Equal(t, "unknown_reference", ae.Code, ae.Error())
	require.Equal(t, "tasks[1].task_type_id", ae.Field, ae.Error())
	for _, deps := range [][]string{{"01a21878-4971-70b3-a4a5-f77e9fcd1c26"}, {"x"}, append(hundredOne, "y")} {
		_, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: "t", TaskTypeID: typeID, DependsOn: deps})
		var ae *client.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusBadRequest, ae.Status, ae.Error())
		require.True(t, strings.HasPrefix(ae.Field, "depends_on"), ae.Error())
	}
	require.Equal(t, before, c.count(`SELECT count(*) FROM task_events`), "nothing created")
}

func requireFieldError(t *testing.T, err error, field string) {
	t.Helper()
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusBadRequest, ae.Status, ae.Error())
	require.Equal(t, "validation_failed", ae.Code, ae.Error())
	require.Equal(t, field, ae.Field, ae.Error())
}
