package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/clawdbot/task-service/events"
)

// minutes is an events.Plan: a slot every minute from anchor.
type minutes struct{ anchor time.Time }

func (m minutes) NextAfter(t time.Time) (time.Time, bool) {
	if t.Before(m.anchor) {
		return m.anchor, true
	}
	return m.anchor.Add((t.Sub(m.anchor)/time.Minute + 1) * time.Minute), true
}

func (m minutes) Last(from, t time.Time) (time.Time, int) {
	n, last := 0, time.Time{}
	for s, _ := m.NextAfter(from.Add(-time.Nanosecond)); !s.After(t); s, _ = m.NextAfter(s) {
		n, last = n+1, s
	}
	return last, n
}

func scheduleIn(state events.ScheduleState) *events.Schedule {
	anchor := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := anchor
	s := &events.Schedule{ID: "s", State: state, Anchor: anchor, NextDueAt: &next}
	s.Overlap, s.MaxFailures = events.OverlapSkip, 3
	if state != events.ScheduleStateActive {
		s.NextDueAt = nil
	}
	return s
}

// The transition table of issue 13: every action from every state.
func TestScheduleTransitionTable(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	plan := minutes{anchor: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	actions := map[string]func(s *events.Schedule) error{
		"pause":  func(s *events.Schedule) error { _, err := s.Pause("admin", ""); return err },
		"resume": func(s *events.Schedule) error { _, err := s.Resume(plan, now, "admin"); return err },
		"cancel": func(s *events.Schedule) error { _, err := s.Cancel("admin", ""); return err },
		"run":    func(s *events.Schedule) error { _, err := s.RunNow("task", now, "admin"); return err },
		"fire": func(s *events.Schedule) error {
			_, err := s.Fire(plan, events.Slot{Due: plan.anchor}, now, "task")
			return err
		},
	}
	allowed := map[string][]events.ScheduleState{
		"pause":  {events.ScheduleStateActive},
		"resume": {events.ScheduleStatePaused},
		"cancel": {events.ScheduleStateActive, events.ScheduleStatePaused},
		"run":    {events.ScheduleStateActive, events.ScheduleStatePaused, events.ScheduleStateFinished},
		"fire":   {events.ScheduleStateActive},
	}
	states := []events.ScheduleState{events.ScheduleStateActive, events.ScheduleStatePaused,
		events.ScheduleStateCancelled, events.ScheduleStateFinished}
	for action, do := range actions {
		for _, st := range states {
			ok := false
			for _, a := range allowed[action] {
				ok = ok || a == st
			}
			err := do(scheduleIn(st))
			switch {
			case ok && err != nil:
				t.Errorf("%s from %s: %v", action, st, err)
			case !ok && !errors.Is(err, events.ErrInvalidTransition):
				t.Errorf("%s from %s: want invalid_transition, got %v", action, st, err)
			}
		}
	}
}

func TestScheduleFoldAndRunNow(t *testing.T) {
	s := scheduleIn(events.ScheduleStateActive)
	plan := minutes{anchor: s.Anchor}
	now := s.Anchor.Add(3*time.Minute + time.Second)
	slot, ok := s.DueSlot(plan, now)
	if !ok || slot.Missed != 3 || !slot.Due.Equal(s.Anchor.Add(3*time.Minute)) {
		t.Fatalf("slot %+v %v", slot, ok)
	}
	apply := func(ps []events.Payload, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			s.Apply(events.Envelope{Payload: p, Version: s.Version + 1, OccurredAt: now})
		}
	}
	apply(s.Fire(plan, slot, now, "t1"))
	if s.Runs != 1 || s.RegularRuns != 1 || !s.NextDueAt.Equal(s.Anchor.Add(4*time.Minute)) {
		t.Fatalf("after firing: %+v", s)
	}
	// A second firing of the same slot is refused by the fold's state.
	if _, err := s.Fire(plan, slot, now, "t2"); !errors.Is(err, events.ErrInvalidTransition) {
		t.Fatalf("fired twice: %v", err)
	}
	next := *s.NextDueAt
	apply(s.RunNow("t3", now, "admin"))
	if s.Runs != 2 || s.RegularRuns != 1 || !s.NextDueAt.Equal(next) {
		t.Fatalf("run now moved the regular times: %+v", s)
	}
	// max_runs ends the schedule.
	s.MaxRuns = 2
	now = next
	slot, _ = s.DueSlot(plan, now)
	apply(s.Fire(plan, slot, now, "t4"))
	if s.State != events.ScheduleStateFinished || s.NextDueAt != nil {
		t.Fatalf("max_runs reached: %+v", s)
	}
}

// Bad timing is refused at the field at fault: dates outside the years 1970
// to 9999 (a typo such as 0026 for 2026), and an "@every" cron descriptor
// under the interval's floor.
func TestScheduleTimingRefusals(t *testing.T) {
	at := func(y int) *time.Time {
		v := time.Date(y, 5, 1, 6, 0, 0, 0, time.UTC)
		return &v
	}
	every := &events.Interval{Every: 1, Unit: events.UnitHours}
	for _, c := range []struct {
		name   string
		timing events.ScheduleTiming
		field  string // "" when valid
	}{
		{"start in 0026", events.ScheduleTiming{Interval: every, StartAt: at(26)}, "start_at"},
		{"start in 0001", events.ScheduleTiming{StartAt: at(1)}, "start_at"},
		{"start in 1700", events.ScheduleTiming{Cron: "0 6 * * *", StartAt: at(1700)}, "start_at"},
		{"start in 1969", events.ScheduleTiming{Interval: every, StartAt: at(1969)}, "start_at"},
		{"start in 1970", events.ScheduleTiming{Interval: every, StartAt: at(1970)}, ""},
		{"start in 9999", events.ScheduleTiming{StartAt: at(9999)}, ""},
		{"end in 0027", events.ScheduleTiming{Interval: every, EndAt: at(27)}, "end_at"},
		{"@every 1s", events.ScheduleTiming{Cron: "@every 1s"}, "cron"},
		{"@every 0s", events.ScheduleTiming{Cron: "@every 0s"}, "cron"},
		{"@every -5m", events.ScheduleTiming{Cron: "@every -5m"}, "cron"},
		{"@every 59.9s", events.ScheduleTiming{Cron: " @every 59.9s "}, "cron"},
		{"@every soon", events.ScheduleTiming{Cron: "@every soon"}, "cron"},
		{"@every 1m", events.ScheduleTiming{Cron: "@every 1m"}, ""},
		{"@every 2h", events.ScheduleTiming{Cron: "@every 2h"}, ""},
		{"@hourly", events.ScheduleTiming{Cron: "@hourly"}, ""},
	} {
		spec := events.ScheduleSpec{Task: events.ScheduleTemplate{Title: "x", TaskTypeID: "t"}, ScheduleTiming: c.timing}
		err := spec.Validate(0)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var ve *events.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: want a validation error on %s, got %v", c.name, c.field, err)
		}
	}
	// Tests that lower the floor may use "@every" under a minute, never zero or less.
	spec := events.ScheduleSpec{Task: events.ScheduleTemplate{Title: "x", TaskTypeID: "t"}, ScheduleTiming: events.ScheduleTiming{Cron: "@every 1s"}}
	if err := spec.Validate(time.Second); err != nil {
		t.Errorf("@every 1s with a floor of 1s: %v", err)
	}
	spec.Cron = "@every -1s"
	if err := spec.Validate(time.Second); err == nil {
		t.Error("@every -1s accepted")
	}
}
