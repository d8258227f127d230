package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Unblocked runs every registered function, in the caller, until it is
// unregistered.
func TestHubUnblocked(t *testing.T) {
	h := NewHub()
	var a, b int
	stopA := h.OnUnblocked(func() { a++ })
	h.OnUnblocked(func() { b++ })
	h.Unblocked()
	require.Equal(t, []int{1, 1}, []int{a, b})
	stopA()
	h.Unblocked()
	require.Equal(t, []int{1, 2}, []int{a, b})
}
