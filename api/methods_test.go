package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMethodTableNamesTheMostExactRoute(t *testing.T) {
	m := newMethodTable([]route{
		{method: "GET", path: "/api/v1/admin/workers/task-types"},
		{method: "POST", path: "/api/v1/admin/workers/task-types"},
		{method: "GET", path: "/api/v1/admin/workers/:id"},
		{method: "PUT", path: "/api/v1/admin/workers/:id"},
		{method: "GET", path: "/api/v1/admin/workers/task-types/:id"},
		{method: "POST", path: "/api/v1/worker/tasks/claims"},
		{method: "GET", path: "/api/v1/worker/tasks/:id"},
	})
	require.Equal(t, []string{"GET", "POST"}, m.allowed("/api/v1/admin/workers/task-types"))
	require.Equal(t, []string{"GET", "PUT"}, m.allowed("/api/v1/admin/workers/0193a0c4-7b1c-7d52-8c2f-1b6a7c1f6b2d"))
	require.Equal(t, []string{"GET"}, m.allowed("/api/v1/admin/workers/task-types/x/"))
	require.Equal(t, []string{"POST"}, m.allowed("/api/v1/worker/tasks/claims"))
	require.Equal(t, []string{"GET"}, m.allowed("/api/v1/worker/tasks/abc"))
	require.Nil(t, m.allowed("/api/v1/worker/tasks/abc/explode"))
	require.Nil(t, m.allowed("/tasks"))
}
