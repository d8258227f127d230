package events

import (
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Limits of a task's dependencies and of a workflow.
const (
	MaxDependencies  = 100
	MaxWorkflowTasks = 1000
	MaxRefLen        = 100
	MaxWorkflowName  = 200
)

// OnDependencyFailureWait keeps a task blocked when a dependency's chain
// ends without completing; the default cancels it.
const OnDependencyFailureWait = "wait"

// ReasonDependencyFailed is the reason of a task cancelled because a
// dependency's chain ended failed, skipped or cancelled.
const ReasonDependencyFailed = "dependency_failed"

// ValidateDependencies checks a task's dependency list: at most
// MaxDependencies distinct task ids.
func ValidateDependencies(ids []string, onFailure string) error {
	if len(ids) > MaxDependencies {
		return Invalid("depends_on", "has %d tasks; at most %d", len(ids), MaxDependencies)
	}
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			return Invalid(fmt.Sprintf("depends_on[%d]", i), "%q is not a task id", id)
		}
		if seen[u.String()] {
			return Invalid(fmt.Sprintf("depends_on[%d]", i), "repeats task %s", id)
		}
		seen[u.String()] = true
	}
	switch onFailure {
	case "", "cancel", OnDependencyFailureWait:
	default:
		return Invalid("on_dependency_failure", "must be cancel or wait")
	}
	if onFailure != "" && len(ids) == 0 {
		return Invalid("on_dependency_failure", "needs depends_on")
	}
	return nil
}

// Unblock releases a blocked task by an admin's decision: it becomes
// pending whatever its dependencies say.
func (t *Task) Unblock(by, reason string) ([]Payload, error) {
	if t.Status != StatusBlocked {
		return nil, &TransitionError{Command: "release", Status: t.Status}
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{TaskUnblocked{By: by, Reason: strings.TrimSpace(reason)}}, nil
}
