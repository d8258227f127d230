package digest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store"
)

func ptr[T any](v T) *T { return &v }

func TestParseClock(t *testing.T) {
	for in, want := range map[string]Clock{"09:00": {9, 0, 0}, "23:59:59": {23, 59, 59}, " 00:05 ": {0, 5, 0}} {
		got, err := ParseClock(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "9:00", "24:00", "12:60", "12:00:60", "noon", "12:00 pm", "12:00:00:00"} {
		_, err := ParseClock(bad)
		require.ErrorContains(t, err, "use HH:MM", bad)
	}
	require.Equal(t, "09:00", Clock{9, 0, 0}.String())
	require.Equal(t, "09:00:30", Clock{9, 0, 30}.String())
}

// The digest's day follows the zone's calendar, DST changes included: the
// day before a spring-forward change is 23 hours long, before a fall-back
// 25, and a digest time the change skips moves forward with it.
func TestScheduleDays(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	s := Schedule{At: Clock{9, 0, 0}, Loc: berlin}
	at := func(v string) time.Time {
		t.Helper()
		x, err := time.ParseInLocation(time.DateTime, v, berlin)
		require.NoError(t, err)
		return x
	}

	now := at("2026-11-26 08:59:59")
	require.Equal(t, at("2026-11-25 09:00:00"), s.Last(now))
	require.Equal(t, at("2026-11-26 09:00:00"), s.Next(now))
	now = at("2026-11-26 09:00:00")
	require.Equal(t, now, s.Last(now), "due at its exact moment")
	require.Equal(t, at("2026-11-27 09:00:00"), s.Next(now))
	require.Equal(t, int64(20261126), s.Key(now))

	from, to := s.Period(at("2026-03-29 09:00:00")) // clocks went forward at 02:00
	require.Equal(t, at("2026-03-28 09:00:00"), from)
	require.Equal(t, 23*time.Hour, to.Sub(from))
	from, to = s.Period(at("2026-10-25 09:00:00")) // and back at 03:00
	require.Equal(t, 25*time.Hour, to.Sub(from))

	skipped := Schedule{At: Clock{2, 30, 0}, Loc: berlin}
	require.Equal(t, at("2026-03-29 03:30:00"), skipped.Next(at("2026-03-29 01:00:00")), "02:30 does not exist that day")

	// The key is the zone's date, not UTC's.
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	require.NoError(t, err)
	require.Equal(t, int64(20261127), Schedule{At: Clock{1, 0, 0}, Loc: kolkata}.Key(time.Date(2026, 11, 26, 20, 0, 0, 0, time.UTC)))
}

func TestText(t *testing.T) {
	loc := time.UTC
	f := &Facts{From: time.Date(2026, 11, 25, 9, 0, 0, 0, loc), To: time.Date(2026, 11, 26, 9, 0, 0, 0, loc),
		Types: []TypeDay{
			{Type: "a<b", Completed: 3, Median: 2 * time.Second},
			{Type: "crawl", Completed: 10, Failed: 4, Retried: 2, Skipped: 1, Exhausted: 1, Median: 90 * time.Second},
			{Type: "idle"},
		},
		Reasons:    []Reason{{"HTTP 429 & more", 3}, {"(no reason given)", 1}},
		QueueDepth: 5, InProgress: 1, Scheduled: 0, WorkersOnline: 1, IdleSlots: 1,
		UsageDay: "2026-11-25", Usage: []store.TypeDayUsage{
			{Name: "crawl", Usage: store.UsageTotals{Reports: 9, Tokens: 1234567, CostUSD: 12.5},
				DailyTokenBudget: ptr(int64(1000000)), DailyCostBudgetUSD: ptr(50.0), Paused: true, PausedBy: "budget"},
			{Name: "idle", Usage: store.UsageTotals{Reports: 1, Tokens: 999, CostUSD: 0.004}},
		}}
	want := `📊 <b>Daily digest</b>: Wed 25 Nov 09:00 to Thu 26 Nov 09:00 (UTC)

<b>Finished</b>: 13 completed, 4 failed (2 retried, 1 skipped, 1 out of retries)
• a&lt;b: 3 completed, 0 failed
• crawl: 10 completed, 4 failed (2 retried, 1 skipped, 1 out of retries)
• idle: 0 completed, 0 failed

<b>Top failure reasons</b>
• 3× HTTP 429 &amp; more
• 1× (no reason given)

<b>Slowest types</b> (median run time)
• crawl: 1m30s
• a&lt;b: 2s

<b>LLM usage</b> on Wed 25 Nov
• crawl: 1,234,567 tokens of 1,000,000 (123%), 12.50 USD of 50.00 (25%); paused by its budget
• idle: 999 tokens, 0.00 USD

<b>Now</b>: 5 queued, 1 in progress, 0 scheduled; 1 worker online, 1 idle slot.`
	require.Equal(t, want, Text(f, loc))
	require.Contains(t, Plain(want), "• a<b: 3 completed")
	require.NotContains(t, Plain(want), "<b>")

	empty := Text(&Facts{From: f.From, To: f.To}, loc)
	require.Contains(t, empty, "\nNo task finished.\n")
	require.NotContains(t, empty, "Slowest")

	many := &Facts{From: f.From, To: f.To}
	for i := range 40 {
		many.Types = append(many.Types, TypeDay{Type: "type_with_a_long_name_" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Completed: i})
	}
	text := Text(many, loc)
	require.Contains(t, text, "• and 25 more types")
	require.Less(t, len([]rune(text)), 4096, "within Telegram's message limit")
}
