package api_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/digest"
)

// The preview is today's digest: before its time, the day so far (the
// task completed a moment ago counts); after it, the day that ended then
// (it does not).
func TestDigestPreview(t *testing.T) {
	t.Parallel()
	for _, before := range []bool{true, false} {
		now := time.Now().UTC()
		at := now.Add(time.Hour)
		if !before {
			at = now.Add(-time.Hour)
		}
		if at.Day() != now.Day() {
			continue // today's digest time would be tomorrow's or yesterday's near midnight
		}
		sched := digest.Schedule{At: digest.Clock{Hour: at.Hour(), Minute: at.Minute()}, Loc: time.UTC}
		b := setupWith(t, nil, func(c *api.Config) { c.Digest = sched })
		tt := b.newType(t, "report")
		w := b.newWorker(t, "Wes", 2)
		task := b.newTask(t, tt, "Weekly report", events.PriorityMedium, "")
		_, err := w.Claim(b.ctx)
		require.NoError(t, err)
		_, err = w.Complete(b.ctx, task.ID)
		require.NoError(t, err)

		p, err := b.admin.PreviewDigest(b.ctx)
		require.NoError(t, err)
		due := time.Date(now.Year(), now.Month(), now.Day(), at.Hour(), at.Minute(), 0, 0, time.UTC)
		require.Equal(t, now.Format(time.DateOnly), p.Day)
		require.Equal(t, "UTC", p.TimeZone)
		require.True(t, due.Equal(p.DueAt), "due %s, got %s", due, p.DueAt)
		require.True(t, due.AddDate(0, 0, -1).Equal(p.From))
		require.Equal(t, before, p.Partial)
		if before {
			require.WithinDuration(t, time.Now(), p.To, time.Minute)
			require.Contains(t, p.Text, "Finished: 1 completed, 0 failed\n• report: 1 completed, 0 failed")
		} else {
			require.True(t, due.Equal(p.To))
			require.Contains(t, p.Text, "No task finished.")
		}
		require.Contains(t, p.HTML, "<b>Daily digest</b>")
		require.NotContains(t, p.Text, "<b>")
		require.Contains(t, p.Text, "Now: 0 queued, 0 in progress, 0 scheduled;")
	}
}
