package reactors_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/reactors"
)

// A wake inside the due timer's gap defers its look to the gap's end. That
// look must not wake the instance again: once it did, and the timer's own
// wake started the next gap, so every subscriber (reactors, the claim gate)
// looked again every MinGap for as long as the instance ran.
func TestDueTimerWakesOthersOnlyWhenATimeComes(t *testing.T) {
	e := newEnv(t)
	const gap = 20 * time.Millisecond
	due, err := reactors.NewDueTimer(reactors.DueTimerConfig{DB: e.db, Hub: e.hub, MinGap: gap, Logger: e.log})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- due.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var wakes atomic.Int64
	wake, unsubscribe := e.hub.Subscribe()
	defer unsubscribe()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
				wakes.Add(1)
			}
		}
	}()
	// Wakes inside the gap after a look: the first look happens at start,
	// and each wake here comes less than a gap after the previous one.
	for range 5 {
		e.hub.Wake()
		time.Sleep(gap / 4)
	}
	time.Sleep(gap) // the last gap ends, and its look runs
	before := wakes.Load()
	time.Sleep(50 * gap)
	require.LessOrEqual(t, wakes.Load()-before, int64(1),
		"with no task scheduled and nothing committed, the due timer went on waking the instance")
}
