package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/storetest"
)

// An idle instance leaves the database alone, but for its heartbeats,
// catch-up ticks and samples. Its due timer once woke every subscriber every
// 21 ms for as long as it ran (ADR 033): about 500 transactions a second
// on an idle database, against about 12 now.
func TestIdleInstanceIsQuiet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	startServer(t, dbURL)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	transactions := func() int64 {
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database
			WHERE datname = current_database()`).Scan(&n))
		return n
	}
	time.Sleep(2 * time.Second) // start-up's own writes are done
	before, start := transactions(), time.Now()
	time.Sleep(3 * time.Second)
	// Backends report their counts to pg_stat_database within a second or
	// so: the bound is far from both figures.
	perSecond := float64(transactions()-before) / time.Since(start).Seconds()
	t.Logf("an idle instance: %.0f transactions a second", perSecond)
	require.Less(t, perSecond, 100.0, "an idle instance keeps the database busy")
}
