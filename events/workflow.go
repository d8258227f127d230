package events

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// StreamWorkflow is the stream of one workflow: a graph of tasks created
// at once. Its tasks carry its id; its status is read from them.
const StreamWorkflow = "workflow"

// WorkflowCreated: the workflow and all its tasks were created in one
// transaction.
type WorkflowCreated struct {
	Name      string `json:"name"`
	TaskCount int    `json:"task_count"`
	CreatedBy string `json:"created_by,omitempty"`
}

// WorkflowCancelled: an admin cancelled the workflow; its open tasks were
// cancelled in the same transaction.
type WorkflowCancelled struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

func (WorkflowCreated) EventType() string   { return "workflow.created" }
func (WorkflowCancelled) EventType() string { return "workflow.cancelled" }

func init() {
	register[WorkflowCreated]()
	register[WorkflowCancelled]()
}

// Workflow is the fold of a workflow stream; the workflows row is this.
type Workflow struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	TaskCount   int        `json:"task_count"`
	CreatedBy   *string    `json:"created_by"`
	CreatedAt   time.Time  `json:"created_at"`
	CancelledAt *time.Time `json:"cancelled_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	Version     int        `json:"version"`
}

// Apply folds one event of the workflow's stream.
func (w *Workflow) Apply(e Envelope) {
	at := e.OccurredAt
	switch p := e.Payload.(type) {
	case WorkflowCreated:
		*w = Workflow{ID: e.StreamID, Name: p.Name, TaskCount: p.TaskCount, CreatedBy: optional(p.CreatedBy), CreatedAt: at}
	case WorkflowCancelled:
		w.CancelledAt = &at
	}
	w.Version = e.Version
	w.UpdatedAt = at
}

// StreamVersion is the version of the last event folded into the aggregate.
func (w *Workflow) StreamVersion() int { return w.Version }

// Cancel decides an admin's cancellation of the workflow.
func (w *Workflow) Cancel(by, reason string) ([]Payload, error) {
	if w.CancelledAt != nil {
		return nil, &TransitionError{Command: "cancel", Status: "cancelled"}
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{WorkflowCancelled{By: by, Reason: reason}}, nil
}

// WorkflowNode is one task of a workflow's graph: its ref and the refs it
// depends on.
type WorkflowNode struct {
	Ref       string
	DependsOn []string
}

// ValidateWorkflow checks a workflow's name and graph: 1 to
// MaxWorkflowTasks tasks with distinct refs, each depending on at most
// MaxDependencies distinct known refs other than its own, and no cycle.
// The error's field names the item at fault (tasks[3].depends_on[1]).
func ValidateWorkflow(name string, nodes []WorkflowNode) error {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return Invalid("name", "is required")
	case utf8.RuneCountInString(name) > MaxWorkflowName:
		return Invalid("name", "is longer than %d characters", MaxWorkflowName)
	case len(nodes) == 0:
		return Invalid("tasks", "is empty; a workflow has 1 to %d tasks", MaxWorkflowTasks)
	case len(nodes) > MaxWorkflowTasks:
		return Invalid("tasks", "has %d tasks; at most %d", len(nodes), MaxWorkflowTasks)
	}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		field := fmt.Sprintf("tasks[%d].ref", i)
		switch {
		case strings.TrimSpace(n.Ref) == "":
			return Invalid(field, "is required")
		case utf8.RuneCountInString(n.Ref) > MaxRefLen:
			return Invalid(field, "is longer than %d characters", MaxRefLen)
		}
		if j, dup := index[n.Ref]; dup {
			return Invalid(field, "%q is also the ref of tasks[%d]", n.Ref, j)
		}
		index[n.Ref] = i
	}
	for i, n := range nodes {
		if len(n.DependsOn) > MaxDependencies {
			return Invalid(fmt.Sprintf("tasks[%d].depends_on", i), "has %d refs; at most %d", len(n.DependsOn), MaxDependencies)
		}
		seen := map[string]bool{}
		for j, d := range n.DependsOn {
			field := fmt.Sprintf("tasks[%d].depends_on[%d]", i, j)
			if _, ok := index[d]; !ok {
				return Invalid(field, "no task in the workflow has ref %q", d)
			}
			if d == n.Ref {
				return Invalid(field, "task %q depends on itself", d)
			}
			if seen[d] {
				return Invalid(field, "repeats %q", d)
			}
			seen[d] = true
		}
	}
	if cycle := findCycle(nodes, index); cycle != nil {
		return Invalid(fmt.Sprintf("tasks[%d].depends_on", index[cycle[0]]), "forms a cycle: %s", strings.Join(cycle, " -> "))
	}
	return nil
}

// findCycle returns the refs of a cycle (first ref repeated at the end),
// nil when the graph is acyclic. Iterative depth-first search, so a long
// chain of a thousand tasks does not grow the stack.
func findCycle(nodes []WorkflowNode, index map[string]int) []string {
	const (
		unseen = iota
		onPath
		finished
	)
	state := make([]int, len(nodes))
	type frame struct{ node, next int }
	for start := range nodes {
		if state[start] != unseen {
			continue
		}
		stack := []frame{{start, 0}}
		state[start] = onPath
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := nodes[top.node].DependsOn
			if top.next == len(deps) {
				state[top.node] = finished
				stack = stack[:len(stack)-1]
				continue
			}
			d := index[deps[top.next]]
			top.next++
			switch state[d] {
			case onPath:
				var cycle []string
				for k := len(stack) - 1; k >= 0; k-- {
					cycle = append([]string{nodes[stack[k].node].Ref}, cycle...)
					if stack[k].node == d {
						break
					}
				}
				return append(cycle, nodes[d].Ref)
			case unseen:
				state[d] = onPath
				stack = append(stack, frame{d, 0})
			}
		}
	}
	return nil
}
