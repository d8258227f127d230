package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/storetest"
)

// A database whose stored transaction ids the server has not reached (a
// logical restore into a new cluster) is refused, with the epoch that
// moves the counter past them; a database the server wrote is not.
func TestCheckCounterRefusesIdsBeyondTheServer(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
		VALUES ('task', gen_random_uuid(), 1, 'task.created', '{}', '{}', now())`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO reactor_checkpoints (name, tx_id, seq) VALUES ('counter-test', pg_current_xact_id(), 1)`)
	require.NoError(t, err)
	require.NoError(t, CheckCounter(ctx, pool))

	for _, table := range []string{"task_events", "reactor_checkpoints"} {
		// What a dump of a cluster whose counter was (epoch 2) 8589934692
		// holds, restored into one that counts afresh.
		const stored = 2<<32 + 100
		_, err = pool.Exec(ctx, `UPDATE `+table+` SET tx_id = '8589934692'::xid8
			WHERE seq = (SELECT max(seq) FROM `+table+`)`)
		require.NoError(t, err)
		err = CheckCounter(ctx, pool)
		var behind *CounterBehindError
		require.True(t, errors.As(err, &behind), "%s: %v", table, err)
		require.Equal(t, uint64(stored), behind.Stored)
		require.Less(t, behind.Next, uint64(stored))
		require.Equal(t, uint64(3), behind.Epoch())
		require.True(t, strings.Contains(err.Error(), "pg_resetwal -e 3 -D <data directory>"), err.Error())
		_, err = pool.Exec(ctx, `UPDATE `+table+` SET tx_id = pg_current_xact_id() WHERE tx_id = '8589934692'::xid8`)
		require.NoError(t, err)
		require.NoError(t, CheckCounter(ctx, pool))
	}
}
