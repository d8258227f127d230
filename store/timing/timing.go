// Package timing is the calendar maths of schedules: when an interval or a
// cron expression in a time zone is due, bounded by start_at and end_at.
// It implements events.Plan. It is pure: no clock, no database; callers pass
// the times. Cron expressions are parsed by robfig/cron/v3 (five fields or
// descriptors such as @daily), the parser most Go schedulers use.
package timing

import (
	"fmt"
	"strings"
	"time"
	// IANA zones inside the binary: a zone accepted when a schedule was
	// created stays loadable on a host without tzdata (about 450 KB).
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/clawdbot/task-service/events"
)

// Plan is the slots of one schedule's timing.
//
// The maths counts in whole seconds of Unix time, never in time.Duration
// across slots: a Duration spans only 292 years, and the difference between
// two dates a plan accepts (years events.MinYear to events.MaxYear) does not
// fit in one. A slot after events.MaxYear is no slot (the schedule is
// finished): such a date could not be written to an event.
type Plan struct {
	step   int64 // fixed intervals (seconds, minutes, hours), in seconds
	days   int   // calendar-day intervals, in loc
	cron   cron.Schedule
	loc    *time.Location
	anchor time.Time // the first slot of an interval; the lower bound of cron slots
	end    *time.Time
	once   bool // a one-time schedule: its one slot is anchor
}

var _ events.Plan = (*Plan)(nil)

// maxCronSteps bounds the slots one Last call walks through (a year of
// every-minute slots): collapsing a longer downtime counts no further.
const maxCronSteps = 600_000

// New builds the plan of a validated timing whose slots count from anchor
// (events.ScheduleTiming.Anchor). A malformed cron expression is a
// validation error on "cron"; an anchor or end_at outside the years
// events.MinYear to events.MaxYear (stored before they were checked) one on
// "start_at" or "end_at".
func New(t events.ScheduleTiming, anchor time.Time) (*Plan, error) {
	loc, err := t.Location()
	if err != nil {
		return nil, events.Invalid("time_zone", "unknown time zone %q (use an IANA name such as Europe/Berlin)", t.TimeZone)
	}
	if err := events.CheckDate("start_at", anchor); err != nil {
		return nil, err
	}
	if t.EndAt != nil {
		if err := events.CheckDate("end_at", *t.EndAt); err != nil {
			return nil, err
		}
	}
	p := &Plan{loc: loc, anchor: anchor.UTC(), end: t.EndAt}
	switch {
	case t.Cron != "":
		if strings.HasPrefix(t.Cron, "TZ=") || strings.HasPrefix(t.Cron, "CRON_TZ=") {
			return nil, events.Invalid("cron", "set the zone in time_zone, not in the expression")
		}
		s, err := cron.ParseStandard(t.Cron)
		if err != nil {
			return nil, events.Invalid("cron", "is not a cron expression (minute hour day-of-month month day-of-week, or @daily...): %v", err)
		}
		p.cron = s
	case t.Interval != nil && t.Interval.Unit == events.UnitDays:
		p.days = t.Interval.Every
	case t.Interval != nil:
		p.step = int64(t.Interval.Nominal() / time.Second)
		if p.step <= 0 {
			return nil, events.Invalid("interval", "must be at least a second")
		}
	default:
		p.once = true
	}
	return p, nil
}

func (p *Plan) inBounds(t time.Time) bool {
	return t.Year() <= events.MaxYear && (p.end == nil || !t.After(*p.end))
}

// NextAfter is the first slot strictly after t.
func (p *Plan) NextAfter(t time.Time) (time.Time, bool) {
	var n time.Time
	switch {
	case p.once:
		if !p.anchor.After(t) {
			return time.Time{}, false
		}
		n = p.anchor
	case p.cron != nil:
		if t.Before(p.anchor) {
			t = p.anchor.Add(-time.Nanosecond)
		}
		n = p.cron.Next(t.In(p.loc)).UTC()
		if n.IsZero() {
			return time.Time{}, false
		}
		if p.repeatedWallClock(n) {
			// The hour a fall-back repeats: cron's wall-clock slot already
			// came an hour earlier; fire it once, as Vixie cron does.
			return p.NextAfter(n)
		}
	default:
		n = p.slot(p.indexAtOrBefore(t) + 1)
	}
	if !p.inBounds(n) {
		return time.Time{}, false
	}
	return n.UTC(), true
}

// repeatedWallClock reports whether the wall-clock time of t in loc was
// already shown earlier (t is in the hour a DST fall-back repeats).
func (p *Plan) repeatedWallClock(t time.Time) bool {
	const layout = "2006-01-02 15:04:05.999999999"
	wall := t.In(p.loc).Format(layout)
	for _, back := range []time.Duration{30 * time.Minute, time.Hour} {
		if t.Add(-back).In(p.loc).Format(layout) == wall {
			return true
		}
	}
	return false
}

// Last is the last slot in [from, t] and how many slots lie there.
func (p *Plan) Last(from, t time.Time) (time.Time, int) {
	if t.Before(from) {
		return time.Time{}, 0
	}
	if p.end != nil && t.After(*p.end) {
		t = *p.end
	}
	switch {
	case p.once:
		if p.anchor.Before(from) || p.anchor.After(t) {
			return time.Time{}, 0
		}
		return p.anchor, 1
	case p.cron != nil:
		var last time.Time
		n := 0
		for cur := from.Add(-time.Nanosecond); n < maxCronSteps; n++ {
			next, ok := p.NextAfter(cur)
			if !ok || next.After(t) {
				break
			}
			last, cur = next, next
		}
		return last, n
	}
	hi := p.indexAtOrBefore(t)
	lo := p.indexAtOrBefore(from.Add(-time.Nanosecond)) + 1
	if hi < lo {
		return time.Time{}, 0
	}
	return p.slot(hi), int(hi - lo + 1)
}

// slot k of an interval: anchor + k steps (k >= 0), or k calendar days
// later at the same wall-clock time in loc.
func (p *Plan) slot(k int64) time.Time {
	if p.days == 0 {
		return time.Unix(p.anchor.Unix()+k*p.step, int64(p.anchor.Nanosecond())).UTC()
	}
	a := p.anchor.In(p.loc)
	return time.Date(a.Year(), a.Month(), a.Day()+int(k)*p.days, a.Hour(), a.Minute(), a.Second(), a.Nanosecond(), p.loc).UTC()
}

// indexAtOrBefore is the largest k with slot(k) <= t; -1 before the anchor.
func (p *Plan) indexAtOrBefore(t time.Time) int64 {
	if t.Before(p.anchor) {
		return -1
	}
	elapsed := wholeSeconds(p.anchor, t)
	if p.days == 0 {
		return elapsed / p.step
	}
	// Estimate from elapsed days, then step to the exact index: a DST
	// change moves a slot by an hour, never by a day.
	k := elapsed / (24 * 60 * 60) / int64(p.days)
	for k > 0 && p.slot(k).After(t) {
		k--
	}
	for !p.slot(k + 1).After(t) {
		k++
	}
	return k
}

// wholeSeconds is the whole seconds from `from` to t (t not before from),
// rounded down, however far apart they are.
func wholeSeconds(from, t time.Time) int64 {
	s := t.Unix() - from.Unix()
	if t.Nanosecond() < from.Nanosecond() {
		s--
	}
	return s
}

// Describe says the timing in words, for lists and messages.
func Describe(t events.ScheduleTiming) string {
	var s string
	switch {
	case t.Cron != "":
		s = fmt.Sprintf("cron %q %s", t.Cron, t.TimeZone)
	case t.Interval != nil:
		unit := strings.TrimSuffix(t.Interval.Unit, "s")
		if t.Interval.Every == 1 {
			s = "every " + unit
		} else {
			s = fmt.Sprintf("every %d %s", t.Interval.Every, t.Interval.Unit)
		}
	default:
		s = "once"
		if t.StartAt != nil {
			s += " at " + t.StartAt.UTC().Format(time.RFC3339)
		}
	}
	if t.MaxRuns > 0 {
		s += fmt.Sprintf(", at most %d runs", t.MaxRuns)
	}
	return s
}
