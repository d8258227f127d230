package events_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

func TestValidateWorkflowNamesTheItemAtFault(t *testing.T) {
	n := func(ref string, deps ...string) events.WorkflowNode {
		return events.WorkflowNode{Ref: ref, DependsOn: deps}
	}
	many := make([]events.WorkflowNode, events.MaxWorkflowTasks+1)
	for i := range many {
		many[i] = n(fmt.Sprint(i))
	}
	hundredOne := make([]string, 101)
	for i := range hundredOne {
		hundredOne[i] = fmt.Sprint(i)
	}
	for _, c := range []struct {
		name  string
		nodes []events.WorkflowNode
		field string
	}{
		{"cycle", []events.WorkflowNode{n("a", "c"), n("b", "a"), n("c", "b")}, "tasks[0].depends_on"},
		{"self", []events.WorkflowNode{n("a"), n("b", "a", "b")}, "tasks[1].depends_on[1]"},
		{"unknown ref", []events.WorkflowNode{n("a", "zz")}, "tasks[0].depends_on[0]"},
		{"duplicate ref", []events.WorkflowNode{n("a"), n("a")}, "tasks[1].ref"},
		{"missing ref", []events.WorkflowNode{n("")}, "tasks[0].ref"},
		{"too many tasks", many, "tasks"},
		{"too many deps", append(many[:101:101], n("x", hundredOne...)), "tasks[101].depends_on"},
		{"empty", nil, "tasks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := events.ValidateWorkflow("w", c.nodes)
			var v *events.ValidationError
			require.ErrorAs(t, err, &v)
			require.Equal(t, c.field, v.Field, v.Message)
		})
	}
	require.NoError(t, events.ValidateWorkflow("w", []events.WorkflowNode{n("a"), n("b", "a"), n("c", "a"), n("d", "b", "c")}))
}
