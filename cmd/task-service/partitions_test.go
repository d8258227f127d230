package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/storetest"
)

// The running service partitions the log by EVENT_PARTITION: with weeks,
// the partitions cover the log from now through two whole weeks ahead, the
// ones it made are named by their ISO week's Monday, and the gauge says
// how many there are.
func TestServiceCreatesEventPartitionsAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	s := startServer(t, dbURL, "EVENT_PARTITION=week")
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()

	now := time.Now().UTC()
	monday := store.PeriodStart(archive.Week, now)
	until := monday.AddDate(0, 0, 21)
	ahead := "task_events_w" + monday.AddDate(0, 0, 14).Format("20060102")
	var parts []store.EventPartition
	require.Eventually(t, func() bool {
		parts, err = store.EventPartitions(ctx, pool)
		require.NoError(t, err)
		at := now
		for _, p := range parts {
			if !p.Default && !p.From.After(at) && p.To.After(at) {
				at = p.To
			}
		}
		return !at.Before(until)
	}, time.Minute, 50*time.Millisecond, "partitions through %s: %v", until, parts)
	names := map[string]bool{}
	for _, p := range parts {
		names[p.Name] = true
	}
	require.True(t, names[ahead], "%s among %v", ahead, parts)
	require.True(t, names["task_events_default"])

	require.Eventually(t, func() bool {
		_, samples := scrape(t, s.base)
		return sum(samples, "taskservice_event_partitions", nil) == float64(len(parts))
	}, time.Minute, 50*time.Millisecond)
}
