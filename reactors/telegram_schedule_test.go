package reactors

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// Tasks a schedule created name it in their messages; a firing that fails
// and the automatic pause it causes are alerts.
func TestTelegramNamesTheSchedule(t *testing.T) {
	t.Parallel()
	e := setupTelegram(t)
	ctx := context.Background()
	f := newFixture(t, e.db, 0, "Genesis")
	every := &events.Interval{Every: 1, Unit: events.UnitMinutes}
	nightly, err := e.db.CreateSchedule(ctx, events.ScheduleSpec{Name: "Nightly <crawl>",
		Task:           events.ScheduleTemplate{TaskTypeID: f.typeID, Title: "Crawl", Params: json.RawMessage(`{}`)},
		ScheduleTiming: events.ScheduleTiming{Interval: every}, MaxFailures: 3}, nil, f.meta)
	require.NoError(t, err)
	fired, err := e.db.FireDue(ctx, 10, nil)
	require.NoError(t, err)
	require.Len(t, fired, 1)
	task := fired[0].TaskID
	f.fail(t, task, events.FailureError, "site down")
	f.do(t, task, func(tk *events.Task) ([]events.Payload, error) { return tk.RetriesExhausted(0) })

	// A schedule whose type is archived: its firing fails, and with
	// max_failures 1 that pauses it at once.
	other := newFixture(t, e.db, 0, "Exodus")
	broken, err := e.db.CreateSchedule(ctx, events.ScheduleSpec{Name: "Weekly digest",
		Task:           events.ScheduleTemplate{TaskTypeID: other.typeID, Title: "Digest", Params: json.RawMessage(`{}`)},
		ScheduleTiming: events.ScheduleTiming{Interval: every}, MaxFailures: 1}, nil, f.meta)
	require.NoError(t, err)
	_, err = e.db.UpdateTaskType(ctx, other.typeID, f.meta, func(tt *events.TaskType) ([]events.Payload, error) { return tt.Archive() })
	require.NoError(t, err)
	fired, err = e.db.FireDue(ctx, 10, nil)
	require.NoError(t, err)
	require.Len(t, fired, 1)
	require.True(t, fired[0].AutoPaused)

	handleAll(t, e.db, NewTelegramReactor(e.cfg), task, nightly.ID, broken.ID)
	lines := outboxLines(t, e.pool)
	require.Len(t, lines, 4, "%+v", lines)
	require.Equal(t, "❌ Crawl failed. Reason: site down. Retry: exhausted (schedule Nightly <crawl>)", lines[0].Plain)
	require.Equal(t, "🚨 Crawl failed after 1 attempt. Needs human attention. (schedule Nightly <crawl>)", lines[1].Plain)
	require.Contains(t, lines[2].Plain, "⚠️ Schedule Weekly digest could not create its task: the template no longer makes a valid task: task.task_type_id: task type")
	require.True(t, lines[2].Urgent)
	require.Contains(t, lines[3].Plain, "⏸️ Schedule Weekly digest paused itself: 1 firings in a row could not create a task")
	require.True(t, lines[3].Urgent)
}
