package replay

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A check's differences count on their sides, all of them, and at most max
// are kept; a changed row names the columns that differ.
func TestCollectorCountsEveryRowAndKeepsMax(t *testing.T) {
	one, two := "1", "2"
	rep := &Report{Tables: map[string]TableDiff{}}
	c := rep.collect("t", 2)
	require.Contains(t, rep.Tables, "t", "a clean check still lists its table")
	c.add(Difference{Key: "a", Side: Changed, Columns: []string{"x", "y"}, Live: []*string{&one, &one}, Events: []*string{&one, &two}})
	c.add(Difference{Key: "b", Side: LiveOnly, Columns: []string{"x", "y"}, Live: []*string{&one, &two}})
	c.add(Difference{Key: "c", Side: EventsOnly, Columns: []string{"x", "y"}, Events: []*string{&one, &two}})
	require.Equal(t, TableDiff{LiveRows: 2, FoldRows: 2}, rep.Tables["t"])
	require.True(t, rep.Truncated)
	require.Len(t, rep.Differences, 2)
	require.Equal(t, "t", rep.Differences[0].Table)
	require.Equal(t, []string{"y"}, rep.Differences[0].Changed)
	require.Nil(t, rep.Differences[1].Changed)
}
