package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// TestClaimsRaceAdminCommands has workers claim and complete the head of the
// queue while admins edit and cancel the same tasks. A claim and a command on
// one task must serialize on the task's row: claims never fail, a command
// that loses to a claim is a 409 invalid transition, and every row is the
// fold of its events at the end. (Appending events before the projection row
// used to deadlock against the claim, which locks the row first.)
func TestClaimsRaceAdminCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	tt := b.newType(t, "contested")
	const n = 600
	ids := make([]string, n)
	for i := range ids {
		task, err := b.db.CreateTask(ctx, b.pool, store.NewTaskParams{TaskTypeID: tt.ID, NewTaskParams: events.NewTaskParams{
			Title: fmt.Sprintf("contested %d", i), Params: json.RawMessage(`{"days":1}`), CreatedBy: b.adminID,
		}}, events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: b.adminID}})
		require.NoError(t, err)
		ids[i] = task.ID
	}
	var workers []*worker
	for i := range 8 {
		workers = append(workers, b.newWorker(t, fmt.Sprintf("Racer%d", i), 1+i%2))
	}

	var g errgroup.Group
	var adminDone atomic.Int32
	var cancelled, won, lost atomic.Int32
	for _, w := range workers {
		g.Go(func() error {
			for {
				got, err := w.Claim(ctx)
				if err != nil {
					cancel()
					return fmt.Errorf("%s: claim: %w", w.Email, err)
				}
				if got == nil {
					if adminDone.Load() == 2 {
						var pending int
						if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE status = 'pending'`).Scan(&pending); err != nil || pending == 0 {
							return err
						}
					}
					continue
				}
				// An admin may cancel the task under the worker: that is a 409
				// for the worker, not a failure.
				if _, err := w.Complete(ctx, got.ID); err != nil && !client.IsStatus(err, http.StatusConflict) {
					cancel()
					return fmt.Errorf("%s: complete: %w", w.Email, err)
				}
			}
		})
	}
	// Two admins keep acting on the head of the queue: the very rows the
	// claims are about to lock.
	for a := range 2 {
		g.Go(func() error {
			defer adminDone.Add(1)
			for i := 0; ; i++ {
				var id string
				err := b.pool.QueryRow(ctx, `SELECT id::text FROM worker_tasks WHERE status = 'pending' AND assigned_to IS NULL
					ORDER BY priority_rank, created_at, id LIMIT 1 OFFSET $1`, (i+a)%3).Scan(&id)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				if err != nil {
					return err
				}
				if i%7 == 0 {
					_, err = b.admin.CancelTask(ctx, id, "racing")
					if err == nil {
						cancelled.Add(1)
					}
				} else {
					title := fmt.Sprintf("contested (edit %d by admin %d)", i, a)
					_, err = b.admin.EditTask(ctx, id, client.TaskEdit{Title: &title})
				}
				var apiErr *client.Error
				switch {
				case err == nil:
					won.Add(1)
				case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && apiErr.Code == "invalid_transition":
					lost.Add(1) // a worker claimed it first
				default:
					cancel()
					return fmt.Errorf("admin on task %s: %w", id, err)
				}
			}
		})
	}
	require.NoError(t, g.Wait())

	// A deadlock whose victim was the admin's command is retried and leaves
	// no other trace, so count them: backends report their statistics when
	// they exit, so close the pool's connections and wait until they are gone.
	b.pool.Reset()
	var others int
	for deadline := time.Now().Add(15 * time.Second); ; {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others))
		if others == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Zero(t, others, "backends of the test database still running")
	var deadlocks int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks))
	t.Logf("admin commands that won: %d, lost to a claim: %d; cancelled: %d", won.Load(), lost.Load(), cancelled.Load())
	require.Zero(t, deadlocks, "deadlocks in the test database")

	var completed, cancelledRows, other int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'),
		count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status NOT IN ('completed', 'cancelled'))
		FROM worker_tasks`).Scan(&completed, &cancelledRows, &other))
	if other != 0 { // say which, and their events: a claim its worker never heard of looks like this
		rows, err := b.pool.Query(ctx, `SELECT w.id::text, w.status, coalesce(w.assigned_to::text, ''),
			(SELECT string_agg(e.version || ' ' || e.type, ', ' ORDER BY e.version) FROM task_events e WHERE e.stream_id = w.id)
			FROM worker_tasks w WHERE status NOT IN ('completed', 'cancelled')`)
		require.NoError(t, err)
		for rows.Next() {
			var id, status, assigned, evs string
			require.NoError(t, rows.Scan(&id, &status, &assigned, &evs))
			t.Logf("task %s left %s, assigned to %q; events: %s", id, status, assigned, evs)
		}
	}
	require.Zero(t, other)
	require.Equal(t, n, completed+cancelledRows)
	require.Equal(t, int(cancelled.Load()), cancelledRows)
	for _, id := range ids {
		folded, _ := b.fold(t, id)
		row, err := b.db.GetTask(ctx, b.pool, id)
		require.NoError(t, err)
		require.Equal(t, *folded, *row)
	}
}
