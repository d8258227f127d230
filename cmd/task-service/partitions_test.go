package main_test

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/storetest"
)

// The running service partitions the log by EVENT_PARTITION: with weeks,
// the partitions cover the log from now through one whole week ahead, the
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
	until := monday.AddDate(0, 0, 14)
	ahead := "task_events_w" + monday.AddDate(0, 0, 7).Format("20060102")
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

// The log's days go by under writers: writers stamp events with a clock
// that crosses several day boundaries past the partitions made ahead (so
// the events land in the default partition, and some with a clock 50
// minutes behind theirs), while a second binary, restarted for each day,
// moves them into their days' partitions, and a consumer pages through the
// whole log over the first binary's API from the start. The consumer gets
// every event exactly once, in the log's order; the default partition
// ends empty; every day has its partition; every task's timeline reads
// whole through the binary.
func TestPartitionsAcrossDaysUnderWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	a := startServer(t, dbURL, "EVENT_PARTITION=day")
	admin := client.New(a.base, nil)
	_, err := admin.Login(ctx, "root@example.com", "root-password")
	require.NoError(t, err)

	pool, err := store.Connect(ctx, dbURL, 8)
	require.NoError(t, err)
	defer pool.Close()
	// The writers' clock starts past the week of partitions made ahead.
	var offset atomic.Int64
	offset.Store(int64(9 * 24 * time.Hour))
	clock := func(behind time.Duration) func() time.Time {
		return func() time.Time { return time.Now().Add(time.Duration(offset.Load()) - behind) }
	}
	sys := events.Meta{Actor: events.System("test")}
	writers := []*store.DB{}
	for _, behind := range []time.Duration{0, 50 * time.Minute} {
		db, err := store.New(pool, store.Config{Projector: projections.Projector{}, Now: clock(behind)})
		require.NoError(t, err)
		writers = append(writers, db)
	}
	tt, err := writers[0].CreateTaskType(ctx, events.TaskTypeSpec{Name: "crawl", SOP: "Crawl it."}, sys)
	require.NoError(t, err)

	// The consumer: pages of 20 from the start, until it has read the
	// position it is given at the end (the log's last event: it reads it
	// once every transaction older than it has ended, cluster-wide).
	last := make(chan string, 1)
	seen := make(chan []client.Event, 1)
	go func() {
		var got []client.Event
		after, until := "0", ""
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
			page, err := admin.Events(ctx, client.EventQuery{After: after, Limit: 20})
			if err != nil {
				t.Errorf("events after %s: %v", after, err)
				break
			}
			got = append(got, page.Events...)
			after = page.Next
			select {
			case until = <-last:
			default:
			}
			if until != "" && len(got) > 0 && got[len(got)-1].Position == until {
				break
			}
			if len(page.Events) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		seen <- got
	}()

	var tasks []string
	for day := range 4 {
		offset.Store(int64(time.Duration(9+day) * 24 * time.Hour))
		var wg sync.WaitGroup
		var mu sync.Mutex
		write := func(db *store.DB, n int) {
			defer wg.Done()
			for range n {
				tk, err := db.CreateTask(ctx, db.Pool(), store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
					Title: "crawl", Params: []byte(`{}`)}}, sys)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				tasks = append(tasks, tk.ID)
				mu.Unlock()
				_, _, err = db.UpdateTask(ctx, db.Pool(), tk.ID, sys, func(t *events.Task) ([]events.Payload, error) {
					return t.Cancel("test", "done with it")
				})
				assert.NoError(t, err)
			}
		}
		// Some of the day's events first (in the default partition), then
		// the day's pass, by a second binary, while the writers write on.
		for _, db := range writers {
			wg.Add(1)
			write(db, 5)
		}
		for _, db := range writers {
			wg.Add(1)
			go write(db, 15)
		}
		b := startServer(t, dbURL, "EVENT_PARTITION=day")
		day := "task_events_d" + time.Now().Add(time.Duration(offset.Load())).UTC().Format("20060102")
		require.Eventually(t, func() bool {
			parts, err := store.EventPartitions(ctx, pool)
			require.NoError(t, err)
			for _, p := range parts {
				if p.Name == day {
					return true
				}
			}
			return false
		}, time.Minute, 20*time.Millisecond, "the pass makes %s", day)
		wg.Wait()
		require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
		<-b.done
	}
	// A last pass with the writers stopped empties the default partition.
	b := startServer(t, dbURL, "EVENT_PARTITION=day")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events_default`).Scan(&n))
		return n == 0
	}, time.Minute, 20*time.Millisecond)
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	<-b.done

	rows, err := pool.Query(ctx, `SELECT tx_id::text || '-' || seq FROM task_events ORDER BY tx_id, seq`)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	last <- want[len(want)-1]
	got := <-seen
	positions := make([]string, len(got))
	for i, e := range got {
		positions[i] = e.Position
	}
	require.Equal(t, want, positions, "the consumer got every event once, in order")
	var days int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT date_trunc('day', occurred_at, 'UTC')) FROM task_events
		WHERE occurred_at > now() + interval '8 days'`).Scan(&days))
	require.GreaterOrEqual(t, days, 4)
	for _, id := range tasks {
		evs, err := admin.TaskEvents(ctx, id)
		require.NoError(t, err)
		require.Len(t, evs, 2, "task %s: created and cancelled", id)
	}
}
