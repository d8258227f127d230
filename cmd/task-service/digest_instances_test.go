package main_test

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

// The daily digest through the real binary: three instances with Telegram
// on, a day of known work, then DIGEST_AT a few seconds ahead. The chat
// gets exactly one digest, with exactly the expected text: when all three
// instances run at its time, and when none does (all restarted just after
// it); instances restarted after it was sent send nothing more.
func TestDigestOnceAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers")
	}
	t.Parallel()
	for _, late := range []bool{false, true} {
		name := map[bool]string{false: "running at its time", true: "all restarted after its time"}[late]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testDigest(t, late)
		})
	}
}

func testDigest(t *testing.T, late bool) {
	const zone = "Asia/Kolkata" // +05:30: the day is not UTC's
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	bot := newBotFake(t, func(int) (int, string) { return 0, "" })
	// The digest will be due when the team's day turns, after the day's
	// work below: its LLM usage is the last whole team day's.
	due := time.Now().Add(60 * time.Second).Truncate(time.Second)
	c := newCluster(t, 3, "TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_CHAT_ID=-100777",
		"TELEGRAM_API_BASE="+bot.srv.URL, "TELEGRAM_WINDOW=200ms", "DIGEST_AT=off", "DIGEST_TZ="+zone,
		"DAY_STARTS_AT="+due.In(loc).Format("15:04:05"))

	// The day: a slow crawl completed, a report completed, a crawl failed
	// and retried; a report queued and a crawl scheduled for tomorrow.
	crawl, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "crawl"})
	require.NoError(t, err)
	report, err := c.admin.CreateTaskType(c.ctx, client.NewTaskType{Name: "report"})
	require.NoError(t, err)
	w := c.worker("digest-worker", 3)
	require.NoError(t, w.clients[0].Heartbeat(c.ctx, client.Heartbeat{Status: "idle"}), "online from its first heartbeat")
	run := func(tt *events.TaskType, title string, hold time.Duration, failReason string, usage *events.UsageReport) string {
		task, err := c.admin.CreateTask(c.ctx, client.NewTask{Title: title, TaskTypeID: tt.ID})
		require.NoError(t, err)
		got, err := w.clients[0].Claim(c.ctx)
		require.NoError(t, err)
		require.Equal(t, task.ID, got.ID)
		if usage != nil {
			_, err = w.clients[0].ReportUsage(c.ctx, task.ID, *usage)
			require.NoError(t, err)
		}
		time.Sleep(hold)
		if failReason != "" {
			_, err = w.clients[0].Fail(c.ctx, task.ID, failReason)
		} else {
			_, err = w.clients[0].Complete(c.ctx, task.ID)
		}
		require.NoError(t, err)
		return task.ID
	}
	cost := 0.25
	slow := run(crawl, "slow crawl", 2200*time.Millisecond, "",
		&events.UsageReport{Model: "claude-sonnet-4-5", InputTokens: 1200, OutputTokens: 3400, CostUSD: &cost})
	quick := run(report, "quick report", 0, "", nil)
	failed := run(crawl, "failing crawl", 0, "HTTP 429 from upstream", nil)
	c.eventually("the failed crawl retried", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE parent_task_id = $1`, failed) == 1
	})
	_, err = c.admin.CreateTask(c.ctx, client.NewTask{Title: "queued report", TaskTypeID: report.ID})
	require.NoError(t, err)
	_, err = c.admin.CreateTask(c.ctx, client.NewTask{Title: "tomorrow's crawl", TaskTypeID: crawl.ID,
		RunAt: time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)})
	require.NoError(t, err)

	// The instances restart with the digest's time.
	require.Less(t, time.Now(), due.Add(-5*time.Second), "the day's work took longer than the test's lead")
	for _, in := range c.ins {
		in.stop(syscall.SIGTERM)
		in.env = append(in.env, "DIGEST_AT="+due.In(loc).Format("15:04:05"))
	}
	if late {
		time.Sleep(time.Until(due.Add(1500 * time.Millisecond)))
	}
	var started sync.WaitGroup
	for _, in := range c.ins {
		started.Go(in.start)
	}
	started.Wait()
	require.False(t, t.Failed())
	require.True(t, late || time.Now().Before(due), "the instances restarted after the digest's time; the test needs a longer lead")

	digests := func() []string {
		var out []string
		for _, m := range bot.sent() {
			if strings.HasPrefix(m, "📊 Daily digest") {
				out = append(out, m)
			}
		}
		return out
	}
	c.eventually("the digest sent", func() bool { return len(digests()) > 0 })

	// Each type completed one task: its median is that task's run time.
	median := func(id string) time.Duration {
		var secs float64
		require.NoError(t, c.pool.QueryRow(c.ctx, `SELECT extract(epoch FROM completed_at - started_at) FROM worker_tasks WHERE id = $1`, id).Scan(&secs))
		return time.Duration(secs * float64(time.Second)).Round(time.Second)
	}
	slowest := fmt.Sprintf("• crawl: %s\n", median(slow))
	if m := median(quick); m > 0 {
		slowest += fmt.Sprintf("• report: %s\n", m)
	}
	from := due.AddDate(0, 0, -1).In(loc)
	want := fmt.Sprintf("📊 Daily digest: %s to %s (Asia/Kolkata)\n", from.Format("Mon 2 Jan 15:04"), due.In(loc).Format("Mon 2 Jan 15:04")) + `
Finished: 2 completed, 1 failed (1 retried, 0 skipped, 0 out of retries)
• crawl: 1 completed, 1 failed (1 retried, 0 skipped, 0 out of retries)
• report: 1 completed, 0 failed

Top failure reasons
• 1× HTTP 429 from upstream

Slowest types (median run time)
` + slowest + `
LLM usage on ` + due.AddDate(0, 0, -1).In(loc).Format("Mon 2 Jan") + `
• crawl: 4,600 tokens, 0.25 USD

Now: 2 queued, 0 in progress, 1 scheduled; 1 worker online, 3 idle slots.`
	require.Equal(t, want, digests()[0])

	// Restarted after it was sent, the instances send nothing more.
	for _, in := range c.ins {
		in.stop(syscall.SIGKILL)
	}
	for _, in := range c.ins {
		in.start()
	}
	time.Sleep(3 * time.Second)
	require.Len(t, digests(), 1, "one digest a day, whatever the instances and restarts")
	require.Equal(t, 1, c.count(`SELECT count(*) FROM telegram_outbox WHERE kind = 'digest'`))
}
