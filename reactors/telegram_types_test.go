package reactors

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// Telegram hears a type paused and resumed, by whom and why; a pause by a
// part of the system (a budget) is an alert.
func TestTelegramHearsTypesPausedAndResumed(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	f := newFixture(t, e.db, 0, "Genesis")
	admin := events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: f.workerID}} // a named user
	change := func(meta events.Meta, decide func(*events.TaskType) ([]events.Payload, error)) {
		t.Helper()
		_, err := e.db.UpdateTaskType(ctx, f.typeID, meta, decide)
		require.NoError(t, err)
	}
	change(admin, func(tt *events.TaskType) ([]events.Payload, error) {
		return tt.Pause(admin.Actor.ID, "Reddit <API> returns 429")
	})
	change(admin, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Resume(admin.Actor.ID, "limit reset") })
	budget := events.Meta{Actor: events.System("budget")}
	change(budget, func(tt *events.TaskType) ([]events.Payload, error) {
		return tt.Pause("budget", "spent 100% of 50 USD today")
	})

	handleAll(t, e.db, NewTelegramReactor(e.cfg), f.typeID)
	lines := outboxLines(t, e.pool)
	require.Equal(t, []outboxLine{
		{kindTypePaused, "⏸️ Task type Crawl paused by Genesis: Reddit <API> returns 429. Its tasks wait until it is resumed.", false},
		{kindTypeResumed, "▶️ Task type Crawl resumed by Genesis: limit reset", false},
		{kindTypePaused, "⏸️ Task type Crawl paused by budget: spent 100% of 50 USD today. Its tasks wait until it is resumed.", true},
	}, lines)
}
