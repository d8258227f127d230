package timing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

func berlin(t *testing.T, y int, m time.Month, d, h, min int) time.Time {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	return time.Date(y, m, d, h, min, 0, 0, loc)
}

func plan(t *testing.T, tm events.ScheduleTiming, anchor time.Time) *Plan {
	t.Helper()
	require.NoError(t, (&events.ScheduleSpec{Task: events.ScheduleTemplate{Title: "x", TaskTypeID: "t"}, ScheduleTiming: tm}).Validate(time.Second))
	p, err := New(tm, anchor)
	require.NoError(t, err)
	return p
}

// slots lists the first n slots after from.
func slots(p *Plan, from time.Time, n int) []time.Time {
	var out []time.Time
	for cur := from; len(out) < n; {
		next, ok := p.NextAfter(cur)
		if !ok {
			break
		}
		out = append(out, next)
		cur = next
	}
	return out
}

func TestFixedIntervalIgnoresDST(t *testing.T) {
	anchor := berlin(t, 2026, 3, 29, 0, 30) // 01:30 in Berlin is two slots before the spring-forward gap
	p := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 90, Unit: events.UnitMinutes}, TimeZone: "Europe/Berlin"}, anchor)
	got := slots(p, anchor.Add(-time.Second), 4)
	for i := 1; i < len(got); i++ {
		assert.Equal(t, 90*time.Minute, got[i].Sub(got[i-1]), "absolute intervals do not care about wall clocks")
	}
	assert.Equal(t, anchor.UTC(), got[0])
}

func TestDayIntervalKeepsWallClockAcrossDST(t *testing.T) {
	// Daily at 06:00 Berlin across spring forward (29 March 2026) and fall back (25 October 2026).
	anchor := berlin(t, 2026, 3, 27, 6, 0)
	p := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitDays}, TimeZone: "Europe/Berlin"}, anchor)
	got := slots(p, anchor.Add(-time.Second), 4)
	loc := anchor.Location()
	for _, s := range got {
		assert.Equal(t, 6, s.In(loc).Hour(), "slot %s", s.In(loc))
	}
	assert.Equal(t, 24*time.Hour, got[1].Sub(got[0]))
	assert.Equal(t, 23*time.Hour, got[2].Sub(got[1]), "the spring-forward day is 23 hours long")
	assert.Equal(t, 24*time.Hour, got[3].Sub(got[2]))

	autumn := berlin(t, 2026, 10, 24, 6, 0)
	p = plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitDays}, TimeZone: "Europe/Berlin"}, autumn)
	got = slots(p, autumn, 2)
	assert.Equal(t, 25*time.Hour, got[0].Sub(autumn), "the fall-back day is 25 hours long")
	assert.Equal(t, 6, got[0].In(loc).Hour())

	// Far from the anchor the index estimate still lands on the right slot.
	far, ok := p.NextAfter(berlin(t, 2030, 1, 1, 12, 0))
	require.True(t, ok)
	assert.Equal(t, berlin(t, 2030, 1, 2, 6, 0).UTC(), far)
}

func TestDayIntervalInTheSpringGap(t *testing.T) {
	// 02:30 does not exist in Berlin on 29 March 2026: that day's slot
	// falls in the hour after the gap, the next day's is 02:30 again.
	anchor := berlin(t, 2026, 3, 28, 2, 30)
	p := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitDays}, TimeZone: "Europe/Berlin"}, anchor)
	got := slots(p, anchor, 2)
	loc := anchor.Location()
	assert.Equal(t, 3, got[0].In(loc).Hour(), "no 02:30 on the spring-forward day: %s", got[0].In(loc))
	assert.Equal(t, 29, got[0].In(loc).Day())
	assert.Equal(t, "02:30", got[1].In(loc).Format("15:04"))
	assert.True(t, got[1].After(got[0]))
}

func TestCronWeekdaysInBerlin(t *testing.T) {
	anchor := berlin(t, 2026, 3, 20, 12, 0)
	p := plan(t, events.ScheduleTiming{Cron: "0 6 * * 1-5", TimeZone: "Europe/Berlin"}, anchor)
	// Friday 27 March (CET, UTC+1), then Monday 30 March (CEST, UTC+2).
	got := slots(p, berlin(t, 2026, 3, 27, 5, 0), 2)
	assert.Equal(t, time.Date(2026, 3, 27, 5, 0, 0, 0, time.UTC), got[0])
	assert.Equal(t, time.Date(2026, 3, 30, 4, 0, 0, 0, time.UTC), got[1])
}

func TestCronAcrossDSTFiresOncePerDay(t *testing.T) {
	// 02:30 daily: on the spring-forward day the wall time does not exist,
	// on the fall-back day it exists twice. Never two firings in one day.
	anchor := berlin(t, 2026, 3, 27, 12, 0)
	p := plan(t, events.ScheduleTiming{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, anchor)
	got := slots(p, anchor, 4)
	loc := anchor.Location()
	for i := 1; i < len(got); i++ {
		assert.NotEqual(t, got[i-1].In(loc).YearDay(), got[i].In(loc).YearDay(), "two firings on %s", got[i].In(loc))
	}
	autumn := berlin(t, 2026, 10, 24, 12, 0)
	p = plan(t, events.ScheduleTiming{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, autumn)
	got = slots(p, autumn, 3)
	for i := 1; i < len(got); i++ {
		assert.NotEqual(t, got[i-1].In(loc).YearDay(), got[i].In(loc).YearDay(), "two firings on %s", got[i].In(loc))
		assert.GreaterOrEqual(t, got[i].Sub(got[i-1]), 23*time.Hour)
	}
}

func TestCronAndTimeZoneErrors(t *testing.T) {
	_, err := New(events.ScheduleTiming{Cron: "61 * * * *", TimeZone: "UTC"}, time.Now())
	var ve *events.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "cron", ve.Field)
	_, err = New(events.ScheduleTiming{Cron: "CRON_TZ=Europe/Berlin 0 6 * * *"}, time.Now())
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "cron", ve.Field)

	spec := events.ScheduleSpec{Task: events.ScheduleTemplate{Title: "x", TaskTypeID: "t"},
		ScheduleTiming: events.ScheduleTiming{Cron: "@daily", TimeZone: "Mars/Olympus"}}
	require.ErrorAs(t, spec.Validate(time.Minute), &ve)
	assert.Equal(t, "time_zone", ve.Field)
}

func TestLastCollapsesMissedSlots(t *testing.T) {
	anchor := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitMinutes}}, anchor)
	last, n := p.Last(anchor.Add(10*time.Minute), anchor.Add(20*time.Minute+30*time.Second))
	assert.Equal(t, 11, n)
	assert.Equal(t, anchor.Add(20*time.Minute), last)
	_, n = p.Last(anchor.Add(10*time.Minute), anchor.Add(9*time.Minute))
	assert.Zero(t, n)

	c := plan(t, events.ScheduleTiming{Cron: "*/15 * * * *"}, anchor)
	last, n = c.Last(anchor.Add(15*time.Minute), anchor.Add(time.Hour+time.Minute))
	assert.Equal(t, 4, n) // 00:15, 00:30, 00:45, 01:00
	assert.Equal(t, anchor.Add(time.Hour), last)

	d := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 2, Unit: events.UnitDays}, TimeZone: "Europe/Berlin"}, anchor)
	last, n = d.Last(anchor, anchor.Add(7*24*time.Hour))
	assert.Equal(t, 4, n) // days 0, 2, 4, 6
	assert.Equal(t, anchor.Add(6*24*time.Hour), last)
}

func TestBoundsAndOneTime(t *testing.T) {
	start := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Hour)
	p := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 1, Unit: events.UnitHours}, StartAt: &start, EndAt: &end}, start)
	assert.Equal(t, []time.Time{start, start.Add(time.Hour), end}, slots(p, start.Add(-time.Hour), 10))
	_, n := p.Last(start, end.Add(5*time.Hour))
	assert.Equal(t, 3, n)

	once := plan(t, events.ScheduleTiming{StartAt: &start}, start)
	assert.Equal(t, []time.Time{start}, slots(once, start.Add(-time.Hour), 10))
	_, ok := once.NextAfter(start)
	assert.False(t, ok)

	c := plan(t, events.ScheduleTiming{Cron: "0 * * * *", StartAt: &start, EndAt: &end}, start)
	assert.Equal(t, []time.Time{start, start.Add(time.Hour), end}, slots(c, time.Time{}, 10))
}

// Slots far from the anchor are exact: the maths never holds the distance
// in a time.Duration, which ends at 292 years.
func TestSlotsCenturiesFromTheAnchor(t *testing.T) {
	anchor := time.Date(1970, 1, 1, 0, 0, 0, 500, time.UTC)
	minutes := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 7, Unit: events.UnitMinutes}}, anchor)
	late := time.Date(9000, 6, 1, 12, 0, 0, 0, time.UTC)
	next, ok := minutes.NextAfter(late)
	require.True(t, ok)
	assert.True(t, next.After(late) && next.Sub(late) <= 7*time.Minute, "%s", next)
	assert.Zero(t, (next.Unix()-anchor.Unix())%(7*60), "a whole number of steps from the anchor: %s", next)
	assert.Equal(t, 500, next.Nanosecond())
	last, n := minutes.Last(anchor, late)
	assert.Equal(t, next.Add(-7*time.Minute), last)
	assert.EqualValues(t, (last.Unix()-anchor.Unix())/(7*60)+1, n)

	days := plan(t, events.ScheduleTiming{Interval: &events.Interval{Every: 3, Unit: events.UnitDays}, TimeZone: "Europe/Berlin"},
		berlin(t, 1970, 1, 1, 6, 0))
	next, ok = days.NextAfter(late)
	require.True(t, ok)
	assert.Equal(t, 6, next.In(mustBerlin(t)).Hour())
	assert.True(t, next.After(late) && next.Sub(late) <= 3*24*time.Hour, "%s", next)

	// A million days is a valid interval that a Duration cannot hold.
	long := events.Interval{Every: 1_000_000, Unit: events.UnitDays}
	require.NoError(t, (&events.ScheduleSpec{Task: events.ScheduleTemplate{Title: "x", TaskTypeID: "t"},
		ScheduleTiming: events.ScheduleTiming{Interval: &long}}).Validate(time.Minute))
}

// No slot after the year 9999: its date could not be written to an event,
// so the schedule ends there.
func TestNoSlotAfterTheYear9999(t *testing.T) {
	anchor := time.Date(9999, 12, 31, 12, 0, 0, 0, time.UTC)
	for _, tm := range []events.ScheduleTiming{
		{Interval: &events.Interval{Every: 1, Unit: events.UnitDays}},
		{Interval: &events.Interval{Every: 13, Unit: events.UnitHours}},
		{Cron: "0 6 * * *"},
	} {
		p := plan(t, tm, anchor)
		first, ok := p.NextAfter(anchor.Add(-time.Second))
		if tm.Cron == "" {
			require.True(t, ok)
			assert.Equal(t, anchor, first)
		}
		_, ok = p.NextAfter(anchor)
		assert.False(t, ok, "%+v", tm)
	}
}

// A plan refuses dates outside the years 1970 to 9999, which a schedule
// stored before they were checked may carry.
func TestPlanRefusesDatesOutOfRange(t *testing.T) {
	var ve *events.ValidationError
	every := &events.Interval{Every: 1, Unit: events.UnitMinutes}
	for _, year := range []int{1, 26, 1700, 1969} {
		_, err := New(events.ScheduleTiming{Interval: every}, time.Date(year, 5, 1, 0, 0, 0, 0, time.UTC))
		require.ErrorAs(t, err, &ve, "year %d", year)
		assert.Equal(t, "start_at", ve.Field)
	}
	end := time.Date(26, 5, 1, 0, 0, 0, 0, time.UTC)
	_, err := New(events.ScheduleTiming{Interval: every, EndAt: &end}, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "end_at", ve.Field)
}

func mustBerlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	return loc
}
