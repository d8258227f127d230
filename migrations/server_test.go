package migrations

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckVersion(t *testing.T) {
	require.NoError(t, checkVersion(130000, "13.0"))
	require.NoError(t, checkVersion(150018, "15.18 (Debian 15.18-0+deb12u1)"))
	err := checkVersion(120017, "12.17")
	require.ErrorContains(t, err, "PostgreSQL 12.17 is too old: task-service needs PostgreSQL 13 or later")
}
