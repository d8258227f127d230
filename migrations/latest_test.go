package migrations

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Latest is the highest number of the embedded migrations (numbers of
// reverted ones are skipped, so they have gaps), and each has a down file.
func TestLatest(t *testing.T) {
	latest, err := Latest()
	require.NoError(t, err)
	ups, err := fs.Glob(FS, "*.up.sql")
	require.NoError(t, err)
	var highest uint64
	for _, up := range ups {
		num, _, _ := strings.Cut(up, "_")
		n, err := strconv.ParseUint(num, 10, 32)
		require.NoError(t, err, up)
		highest = max(highest, n)
		_, err = fs.Stat(FS, strings.TrimSuffix(up, ".up.sql")+".down.sql")
		require.NoError(t, err, "%s has its down file", up)
	}
	require.EqualValues(t, highest, latest)
}
