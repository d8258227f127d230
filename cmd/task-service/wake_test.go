package main_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store"
)

// Two instances with a long NOTIFY_INTERVAL: a create on one instance after
// a quiet moment is announced to the other at once (the leading edge), and
// its worker long-polling there gets the task; a burst of creates shares
// one NOTIFY; the next quiet create is announced at once again; every
// NOTIFY sent is heard (ADR 027). The pacer's bounds are TestNotifyPacer's.
func TestInstancesNotifyLeadingEdge(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	c := newCluster(t, 2, fmt.Sprintf("NOTIFY_INTERVAL=%s", interval))
	creator, waiter := c.ins[0], c.ins[1]
	tt, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "wake"})
	require.NoError(t, err)
	w := c.worker("waker", 20)
	sent := func() float64 { return metric(t, creator.base, "taskservice_notifies_sent_total") }
	carried := func() float64 { return metric(t, creator.base, "taskservice_notifies_carried_total") }
	heard := func() float64 { return metric(t, waiter.base, "taskservice_listener_notifications_total") }

	got := make(chan []*store.TaskWithType, 1)
	go func() {
		tasks, err := w.clients[1].ClaimMany(c.ctx, 1, 30*time.Second)
		if err != nil {
			t.Errorf("long-poll on the other instance: %v", err)
		}
		got <- tasks
	}()
	c.eventually("the worker to wait on the other instance", func() bool {
		return metric(t, waiter.base, "taskservice_claim_waiters") == 1
	})
	// From here every NOTIFY the creator sends finds the other listening.
	sent0, heard0 := sent(), heard()

	// createQuiet creates a task after a quiet moment on the creator (no
	// commit for interval/10: nothing to wait for but time) and requires
	// its NOTIFY well before the interval would send one: the create's own
	// transaction carried it (ADR 032), counted before the create answers.
	createQuiet := func(title string) string {
		t.Helper()
		time.Sleep(interval/10 + 100*time.Millisecond)
		before, carriedBefore := sent(), carried()
		task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: title, TaskTypeID: tt.ID})
		require.NoError(t, err)
		answered := time.Now()
		require.Equal(t, carriedBefore+1, carried(), "the create's transaction carried its NOTIFY")
		c.eventually("the creator's NOTIFY", func() bool { return sent() > before })
		require.Less(t, time.Since(answered), interval/2, "a create after a quiet moment is announced at once, not at the interval")
		return task.ID
	}

	first := createQuiet("first")
	tasks := <-got
	require.Len(t, tasks, 1)
	require.Equal(t, first, tasks[0].ID, "the worker on the other instance gets the task")

	// A burst: ten creates at once share the NOTIFY of their interval (the
	// first may still find the creator quiet and go at once). First a wait
	// of an interval, so no NOTIFY due for earlier commits (the claim's
	// events, reactors) falls into the burst.
	time.Sleep(interval + interval/10)
	before, burstFrom := sent(), time.Now()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			_, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: fmt.Sprintf("burst %d", i), TaskTypeID: tt.ID})
			if err != nil {
				t.Errorf("burst create: %v", err)
			}
		})
	}
	wg.Wait()
	// The pacer's bound: one NOTIFY per quiet moment (interval/10 without a
	// commit) plus one per interval. Ten creates at once are all within one
	// quiet moment, unless a loaded machine spreads them out; the bound
	// follows the time they took, and stays below one NOTIFY a create.
	took := time.Since(burstFrom)
	bound := 1 + float64(took/(interval/10)) + float64(took/interval)
	t.Logf("the burst took %s and sent %v NOTIFYs", took, sent()-before)
	require.LessOrEqual(t, sent()-before, bound, "a burst sends one NOTIFY per quiet moment and one an interval")
	if took < interval/10 {
		require.LessOrEqual(t, sent()-before, 1.0, "ten creates within a quiet moment share one NOTIFY (and the interval's)")
	}

	// The next quiet commit is announced at once, and covers the burst.
	createQuiet("after the burst")
	c.eventually("every NOTIFY heard by the other instance", func() bool { return heard()-heard0 >= sent()-sent0 })
}
