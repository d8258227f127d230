package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// TestInstancesReleasePreassignedOfOffline: pending tasks pre-assigned to a
// worker that went silent (or said it was going offline) show as stuck on
// the dashboard and in the stuck list while no stuck detector runs; once an
// instance with the detector joins, they go back to the pool with
// task.released and the reason, and another worker claims them. A worker
// that keeps heart-beating keeps its pre-assigned task.
func TestInstancesReleasePreassignedOfOffline(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDB(t)
	thresholds := []string{"WORKER_OFFLINE_AFTER=2s", "TASK_STUCK_AFTER=3s", "STUCK_TICK=200ms"}
	ins := startInstances(t, dbURL, 1, append(thresholds, "STUCK_DETECTOR=false")...)
	require.False(t, t.Failed())
	c := &cluster{t: t, ctx: t.Context(), ins: ins, hc: checkedHTTP(t, ins[0].base, nil)}
	c.admin = client.New(ins[0].base, c.hc)
	login, err := c.admin.Login(c.ctx, "root@example.com", "root-password")
	require.NoError(t, err)
	c.pool, err = pgxpool.New(c.ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(c.pool.Close)

	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "preassigned"})
	require.NoError(t, err)
	silent, leaving, alive := c.worker("silent", 1), c.worker("leaving", 1), c.worker("alive", 1)
	for _, w := range []*clusterWorker{silent, leaving, alive} {
		require.NoError(t, w.clients[0].Heartbeat(c.ctx, client.Heartbeat{Status: "idle"}))
	}
	var held []string
	for i, w := range []*clusterWorker{silent, silent, leaving, alive} {
		task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: fmt.Sprintf("Preassigned %d", i), TaskTypeID: tt.ID, AssignedTo: w.id})
		require.NoError(t, err)
		if w != alive {
			held = append(held, task.ID)
		}
	}
	require.NoError(t, leaving.clients[0].Heartbeat(c.ctx, client.Heartbeat{Status: "offline"}))
	stop := heartbeats(alive)
	defer stop()

	stuckNow := func() int {
		s, err := c.admin.Stats(c.ctx)
		require.NoError(t, err)
		return int(s["stuck"].(float64))
	}
	c.eventually("the silent and the departed worker's tasks to show as stuck", func() bool { return stuckNow() == 3 })
	list := uiPage(t, ins[0].base+"/tasks?stuck=1", login.Token)
	for i := range 3 {
		require.Contains(t, list, fmt.Sprintf("Preassigned %d", i))
	}
	require.NotContains(t, list, "Preassigned 3", "the live worker's task is not stuck")
	require.Equal(t, 0, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.released'`))

	detector := startInstances(t, dbURL, 1, thresholds...)[0]
	c.eventually("the stuck pre-assigned tasks to go back to the pool", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND status = 'pending' AND assigned_to IS NULL`, held) == 3
	})
	require.Equal(t, 3, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.released' AND stream_id = ANY($1)
		AND data->>'reason' LIKE 'worker offline: not heard from since % (offline threshold 2 s); released to the pool'
		AND meta->'actor'->>'id' = 'stuck-detector'`, held), "each released once, with the reason")
	require.Equal(t, 1, c.count(`SELECT count(*) FROM task_events WHERE type = 'worker.went_offline' AND stream_id = $1`, silent.id))
	require.Equal(t, 0, stuckNow())
	_, samples := scrape(t, detector.base)
	require.EqualValues(t, 3, sum(samples, "taskservice_stuck_detector_actions_total", map[string]string{"action": "released_offline"}))
	require.Equal(t, 1, c.count(`SELECT count(*) FROM worker_tasks WHERE assigned_to = $1 AND status = 'pending'`, alive.id),
		"a live worker keeps its pre-assigned task")

	rescuer := c.worker("rescuer", 3)
	for range held {
		got, err := rescuer.clients[0].Claim(c.ctx)
		require.NoError(t, err)
		require.NotNil(t, got, "a released task is claimable")
		require.Contains(t, held, got.ID)
	}
}

// heartbeats keeps w heart-beating until the returned stop is called.
func heartbeats(w *clusterWorker) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			_ = w.do(0, func(cl *client.Client) error {
				return cl.Heartbeat(context.Background(), client.Heartbeat{Status: "idle"})
			})
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-finished }
}

// uiPage reads an admin UI page with the session cookie.
func uiPage(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: token})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}
