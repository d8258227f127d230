package reactors

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/storetest"
)

// A pass that gives up on its lock (a reader holds the log past the pass's
// lock timeout, as autovacuum can hold the default partition) is followed
// by another within Retry, not a whole Every later: the events it was to
// move out of the default partition do not wait there for an hour.
func TestPartitionsRetrySoonAfterALockTimeout(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
		VALUES ('task', gen_random_uuid(), 1, 'task.update_posted', '{"message":"m"}', '{}', now() - interval '3 days')`)
	require.NoError(t, err)
	inDefault := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events_default`).Scan(&n))
		return n
	}
	require.Equal(t, 1, inDefault())

	reader, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	_, err = reader.Exec(ctx, `SELECT count(*) FROM task_events`)
	require.NoError(t, err)

	logs := &syncBuffer{}
	p, err := NewPartitions(PartitionsConfig{DB: db, Policy: store.PartitionPolicy{Kind: "day", Ahead: 1},
		Every: time.Hour, Retry: 100 * time.Millisecond, Logger: zerolog.New(logs)})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cannot maintain") },
		time.Minute, 20*time.Millisecond, "the pass waits for the reader and gives up")
	require.Equal(t, 1, inDefault())
	require.NoError(t, reader.Rollback(ctx))
	require.Eventually(t, func() bool { return inDefault() == 0 }, time.Minute, 20*time.Millisecond,
		"a pass soon after moves the event; logs:\n%s", logs.String())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "maintained the event log's partitions") },
		time.Minute, 20*time.Millisecond)
}
