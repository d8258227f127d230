package events

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// ScheduleState is a schedule's place in its life.
type ScheduleState string

const (
	ScheduleStateActive    ScheduleState = "active"
	ScheduleStatePaused    ScheduleState = "paused"
	ScheduleStateCancelled ScheduleState = "cancelled"
	// ScheduleStateFinished: no slot is left (end_at passed, max_runs reached,
	// a one-time schedule fired). It can still be run by hand or updated.
	ScheduleStateFinished ScheduleState = "finished"
)

// Valid reports whether s is a known state.
func (s ScheduleState) Valid() bool {
	switch s {
	case ScheduleStateActive, ScheduleStatePaused, ScheduleStateCancelled, ScheduleStateFinished:
		return true
	}
	return false
}

// Overlap policies: what a due firing does while the previous execution's
// retry chain has not ended.
const (
	OverlapSkip  = "skip"
	OverlapAllow = "allow"
)

// Interval units.
const (
	UnitSeconds = "seconds" // whole minutes and more, unless the minimum interval is lowered
	UnitMinutes = "minutes"
	UnitHours   = "hours"
	UnitDays    = "days"
)

// Interval repeats every Every units. Days are calendar days in the
// schedule's time zone: the wall-clock time stays across DST changes.
type Interval struct {
	Every int    `json:"every" openapi:"required,min=1,max=1000000"`
	Unit  string `json:"unit" openapi:"required,enum=seconds|minutes|hours|days"`
}

// Nominal is the interval's length, a day counted as 24 hours. It stops at
// the longest time.Duration (about 292 years) rather than overflow: a million
// days is a valid interval that a Duration cannot hold.
func (i Interval) Nominal() time.Duration {
	var unit time.Duration
	switch i.Unit {
	case UnitSeconds:
		unit = time.Second
	case UnitMinutes:
		unit = time.Minute
	case UnitHours:
		unit = time.Hour
	case UnitDays:
		unit = 24 * time.Hour
	}
	if unit == 0 || i.Every <= 0 {
		return 0
	}
	if time.Duration(i.Every) > math.MaxInt64/unit {
		return math.MaxInt64
	}
	return time.Duration(i.Every) * unit
}

// ScheduleTemplate is the task every firing creates.
type ScheduleTemplate struct {
	TaskTypeID  string          `json:"task_type_id" openapi:"required,format=uuid"`
	Title       string          `json:"title" openapi:"required,nonblank,maxLength=500"`
	Description string          `json:"description" openapi:"maxLength=100000"`
	Params      json.RawMessage `json:"params,omitempty"`
	Priority    Priority        `json:"priority"`
	AssignedTo  string          `json:"assigned_to,omitempty" openapi:"format=uuid"`
}

// ScheduleTiming says when a schedule is due: an interval, a cron
// expression (in TimeZone), or neither (a one-time schedule at StartAt);
// optionally bounded by StartAt, EndAt and MaxRuns.
type ScheduleTiming struct {
	Interval *Interval  `json:"interval,omitempty"`
	Cron     string     `json:"cron,omitempty"`
	TimeZone string     `json:"time_zone"`
	StartAt  *time.Time `json:"start_at,omitempty"`
	EndAt    *time.Time `json:"end_at,omitempty"`
	MaxRuns  int        `json:"max_runs,omitempty"`
}

// OneTime reports whether the schedule fires once, at StartAt.
func (t ScheduleTiming) OneTime() bool { return t.Interval == nil && t.Cron == "" }

// ScheduleSpec is what an admin defines.
type ScheduleSpec struct {
	Name string           `json:"name"`
	Task ScheduleTemplate `json:"task"`
	ScheduleTiming
	Overlap string `json:"overlap"`
	// MaxFailures consecutive executions whose retry chains end failed (or
	// consecutive firings that fail) pause the schedule; 0 never does.
	MaxFailures int `json:"max_failures"`
}

// Limits of a schedule.
const (
	DefaultMaxFailures   = 3
	MaxFailuresLimit     = 100
	maxScheduleNameLen   = 200
	DefaultMinInterval   = time.Minute
	maxIntervalEvery     = 1_000_000
	maxScheduleRunsLimit = 1_000_000_000
)

// Validate checks a spec and fills defaults: name from the title, UTC,
// priority medium, params {}, overlap skip. Intervals shorter than
// minInterval are refused. The cron expression's syntax is checked by the
// caller that parses it (package store/timing); its time zone here.
func (s *ScheduleSpec) Validate(minInterval time.Duration) error {
	t := &s.Task
	t.Title = strings.TrimSpace(t.Title)
	if t.Title == "" {
		return Invalid("task.title", "is required")
	}
	if utf8.RuneCountInString(t.Title) > MaxTitleLen {
		return Invalid("task.title", "is longer than %d characters", MaxTitleLen)
	}
	if TooLong(t.Description, MaxDescriptionLen) {
		return Invalid("task.description", "is longer than %d characters", MaxDescriptionLen)
	}
	if t.TaskTypeID == "" {
		return Invalid("task.task_type_id", "is required")
	}
	if t.Priority == "" {
		t.Priority = PriorityMedium
	}
	if t.Priority.Rank() < 0 {
		return Invalid("task.priority", "must be one of urgent, high, medium, low")
	}
	params, err := objectParams(t.Params)
	if err != nil {
		return Invalid("task.params", "must be a JSON object")
	}
	t.Params = params
	s.Name = strings.TrimSpace(s.Name)
	if s.Name == "" {
		s.Name = cut(t.Title, maxScheduleNameLen) // a title may be longer than a name
	}
	if utf8.RuneCountInString(s.Name) > maxScheduleNameLen {
		return Invalid("name", "is longer than %d characters", maxScheduleNameLen)
	}
	if err := s.ScheduleTiming.validate(minInterval); err != nil {
		return err
	}
	if s.Overlap == "" {
		s.Overlap = OverlapSkip
	}
	if s.Overlap != OverlapSkip && s.Overlap != OverlapAllow {
		return Invalid("overlap", "must be skip or allow")
	}
	if s.MaxFailures < 0 || s.MaxFailures > MaxFailuresLimit {
		return Invalid("max_failures", "must be between 0 (never pause) and %d", MaxFailuresLimit)
	}
	return nil
}

func (t *ScheduleTiming) validate(minInterval time.Duration) error {
	if minInterval <= 0 {
		minInterval = DefaultMinInterval
	}
	if t.Interval != nil && t.Cron != "" {
		return Invalid("cron", "give either interval or cron, not both")
	}
	if i := t.Interval; i != nil {
		switch i.Unit {
		case UnitSeconds, UnitMinutes, UnitHours, UnitDays:
		default:
			return Invalid("interval.unit", "must be seconds, minutes, hours or days")
		}
		if i.Every < 1 || i.Every > maxIntervalEvery {
			return Invalid("interval.every", "must be between 1 and %d", maxIntervalEvery)
		}
		if i.Nominal() < minInterval {
			return Invalid("interval", "must be at least %s", minInterval)
		}
	}
	t.Cron = strings.TrimSpace(t.Cron)
	if err := checkCronFloor(t.Cron, minInterval); err != nil {
		return err
	}
	if t.TimeZone == "" {
		t.TimeZone = "UTC"
	}
	if _, err := t.Location(); err != nil {
		return Invalid("time_zone", "unknown time zone %q (use an IANA name such as Europe/Berlin)", t.TimeZone)
	}
	if t.OneTime() && t.StartAt == nil {
		return Invalid("start_at", "is required for a one-time schedule (no interval and no cron)")
	}
	if t.StartAt != nil {
		u := t.StartAt.UTC().Truncate(time.Microsecond)
		t.StartAt = &u
		if err := CheckDate("start_at", u); err != nil {
			return err
		}
	}
	if t.EndAt != nil {
		u := t.EndAt.UTC().Truncate(time.Microsecond)
		t.EndAt = &u
		if err := CheckDate("end_at", u); err != nil {
			return err
		}
		if t.StartAt != nil && !u.After(*t.StartAt) {
			return Invalid("end_at", "must be after start_at")
		}
	}
	if t.MaxRuns < 0 || t.MaxRuns > maxScheduleRunsLimit {
		return Invalid("max_runs", "must be between 0 (no limit) and %d", maxScheduleRunsLimit)
	}
	return nil
}

// checkCronFloor applies the interval's floor to the one cron form that
// can go under it: "@every <duration>" (five-field expressions step by whole
// minutes). The parser would take "@every 1s", and turn "@every 0s" or
// "@every -5m" into every second.
func checkCronFloor(expr string, minInterval time.Duration) error {
	every, ok := strings.CutPrefix(expr, "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(every)
	if err != nil {
		return Invalid("cron", "@every takes a duration such as 30m or 2h: %v", err)
	}
	if d < minInterval {
		return Invalid("cron", "@every must be at least %s", minInterval)
	}
	return nil
}

// Location is the schedule's time zone.
func (t ScheduleTiming) Location() (*time.Location, error) {
	if t.TimeZone == "" || t.TimeZone == "UTC" {
		return time.UTC, nil
	}
	if strings.EqualFold(t.TimeZone, "local") {
		return nil, fmt.Errorf("Local is not a time zone")
	}
	return time.LoadLocation(t.TimeZone)
}

// Anchor is where interval slots count from: start_at, or now.
func (t ScheduleTiming) Anchor(now time.Time) time.Time {
	if t.StartAt != nil {
		return *t.StartAt
	}
	return now.UTC().Truncate(time.Microsecond)
}

// Plan answers when a schedule is due; package store/timing implements it
// for a timing and its anchor (slots at or after the anchor and start_at,
// at or before end_at; max_runs is counted here, not there).
type Plan interface {
	// NextAfter is the first slot strictly after t; false when none is left.
	NextAfter(t time.Time) (time.Time, bool)
	// Last is the last slot at or before t that is not before from, and how
	// many slots lie in [from, t]; n is 0 when none does.
	Last(from, t time.Time) (last time.Time, n int)
}

// Schedule is the fold of a schedule stream; the schedules row is exactly this.
type Schedule struct {
	ID string `json:"id"`
	ScheduleSpec
	State     ScheduleState `json:"state"`
	Anchor    time.Time     `json:"anchor"`
	NextDueAt *time.Time    `json:"next_due_at"`
	// Runs counts executions (task created), manual ones included; it
	// numbers them. RegularRuns counts the ones max_runs limits.
	Runs         int `json:"runs"`
	RegularRuns  int `json:"regular_runs"`
	Skips        int `json:"skips"`
	FireFailures int `json:"fire_failures"`
	// ConsecutiveFireFailures resets at every firing that creates a task.
	ConsecutiveFireFailures int        `json:"consecutive_fire_failures"`
	LastDueAt               *time.Time `json:"last_due_at"`
	LastFiredAt             *time.Time `json:"last_fired_at"`
	// ResumedAfterRun: failed executions numbered up to it no longer count
	// towards an automatic pause (they were before the last resume).
	ResumedAfterRun int       `json:"resumed_after_run"`
	PausedReason    string    `json:"paused_reason,omitempty"`
	AutoPaused      bool      `json:"auto_paused"`
	CreatedBy       *string   `json:"created_by"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	Version         int       `json:"version"`
}

// Apply folds one event of the schedule's stream. It never fails.
func (s *Schedule) Apply(e Envelope) {
	at := e.OccurredAt
	switch p := e.Payload.(type) {
	case ScheduleCreated:
		*s = Schedule{ID: e.StreamID, ScheduleSpec: p.ScheduleSpec, Anchor: p.Anchor, NextDueAt: p.NextDueAt,
			CreatedBy: optional(p.CreatedBy), CreatedAt: at}
		s.State = stateFor(p.NextDueAt)
	case ScheduleUpdated:
		s.ScheduleSpec, s.Anchor, s.NextDueAt = p.ScheduleSpec, p.Anchor, p.NextDueAt
		if s.State != ScheduleStatePaused {
			s.State = stateFor(p.NextDueAt)
		} else {
			s.NextDueAt = nil
		}
	case SchedulePaused:
		s.State, s.NextDueAt, s.PausedReason, s.AutoPaused = ScheduleStatePaused, nil, p.Reason, p.Auto
	case ScheduleResumed:
		s.State, s.NextDueAt = stateFor(p.NextDueAt), p.NextDueAt
		s.PausedReason, s.AutoPaused, s.ResumedAfterRun = "", false, s.Runs
		s.ConsecutiveFireFailures = 0
	case ScheduleCancelled:
		s.State, s.NextDueAt = ScheduleStateCancelled, nil
	case ScheduleFired:
		s.Runs++
		s.LastFiredAt = &at
		if !p.Manual {
			s.RegularRuns++
			s.ConsecutiveFireFailures = 0
			s.regularSlot(p.DueAt, p.NextDueAt)
		}
	case ScheduleSkipped:
		s.Skips++
		s.regularSlot(p.DueAt, p.NextDueAt)
	case ScheduleFireFailed:
		s.FireFailures++
		s.ConsecutiveFireFailures++
		s.regularSlot(p.DueAt, p.NextDueAt)
	}
	s.Version = e.Version
	s.UpdatedAt = at
}

// regularSlot moves a schedule past a slot it handled.
func (s *Schedule) regularSlot(due time.Time, next *time.Time) {
	d := due
	s.LastDueAt = &d
	if s.State == ScheduleStateActive {
		s.NextDueAt = next
		s.State = stateFor(next)
	}
}

func stateFor(next *time.Time) ScheduleState {
	if next == nil {
		return ScheduleStateFinished
	}
	return ScheduleStateActive
}

// FoldSchedule folds a whole stream; nil when it is empty.
func FoldSchedule(stream []Envelope) *Schedule {
	if len(stream) == 0 {
		return nil
	}
	s := &Schedule{}
	for _, e := range stream {
		s.Apply(e)
	}
	return s
}

// ScheduleTransitionError says which action the schedule's state forbids.
type ScheduleTransitionError struct {
	Command string
	State   ScheduleState
}

func (e *ScheduleTransitionError) Error() string {
	return fmt.Sprintf("cannot %s a schedule that is %s", e.Command, e.State)
}

func (e *ScheduleTransitionError) Unwrap() error { return ErrInvalidTransition }

// The transition table (issue 13, after the seed's):
//
//	pause   from active
//	resume  from paused
//	cancel  from active or paused
//	run now from any state but cancelled (the regular times do not move)
//	update  from any state but cancelled
//
// Firings (fired, skipped, fire_failed) happen to an active schedule at its
// due slot only.
func (s *Schedule) allowed(command string) error {
	ok := false
	switch command {
	case "pause":
		ok = s.State == ScheduleStateActive
	case "resume":
		ok = s.State == ScheduleStatePaused
	case "cancel":
		ok = s.State == ScheduleStateActive || s.State == ScheduleStatePaused
	case "run", "update":
		ok = s.State != ScheduleStateCancelled
	case "fire":
		ok = s.State == ScheduleStateActive
	}
	if !ok {
		return &ScheduleTransitionError{Command: command, State: s.State}
	}
	return nil
}

// next is the first slot after t, unless runs already reached max_runs.
func (s *Schedule) next(plan Plan, t time.Time, regularRuns int) *time.Time {
	if s.MaxRuns > 0 && regularRuns >= s.MaxRuns {
		return nil
	}
	n, ok := plan.NextAfter(t)
	if !ok {
		return nil
	}
	return &n
}

// firstSlot is the first slot of a timing: at or after its anchor.
func firstSlot(plan Plan, anchor time.Time) *time.Time {
	n, ok := plan.NextAfter(anchor.Add(-time.Microsecond))
	if !ok {
		return nil
	}
	return &n
}

// NewSchedule decides the creation of a schedule from a spec validated by
// Validate and its plan (built for spec's timing and spec.Anchor(now)).
func NewSchedule(spec ScheduleSpec, plan Plan, now time.Time, by string) ([]Payload, error) {
	anchor := spec.Anchor(now)
	first := firstSlot(plan, anchor)
	if first == nil {
		return nil, Invalid("end_at", "leaves no time for a single firing")
	}
	return []Payload{ScheduleCreated{ScheduleSpec: spec, Anchor: anchor, NextDueAt: first, CreatedBy: by}}, nil
}

// Update decides an edit: spec is the whole definition after it, validated;
// plan is built for its timing and anchor. An unchanged timing keeps its
// next slot; a changed one (or a finished schedule given new timing) is due
// from the first slot at or after now.
func (s *Schedule) Update(spec ScheduleSpec, plan Plan, anchor, now time.Time, by string) ([]Payload, error) {
	if err := s.allowed("update"); err != nil {
		return nil, err
	}
	next := s.NextDueAt
	if next == nil || !timingEqual(spec.ScheduleTiming, s.ScheduleTiming) || !anchor.Equal(s.Anchor) {
		from := now.UTC().Truncate(time.Microsecond)
		if anchor.After(from) {
			from = anchor
		}
		next = s.next(plan, from.Add(-time.Microsecond), s.RegularRuns)
	}
	if s.State != ScheduleStateFinished && next == nil && s.State != ScheduleStatePaused {
		return nil, Invalid("end_at", "leaves no time for another firing")
	}
	return []Payload{ScheduleUpdated{ScheduleSpec: spec, Anchor: anchor, NextDueAt: next, By: by}}, nil
}

func timingEqual(a, b ScheduleTiming) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Pause stops firings until a resume.
func (s *Schedule) Pause(by, reason string) ([]Payload, error) {
	if err := s.allowed("pause"); err != nil {
		return nil, err
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{SchedulePaused{By: by, Reason: reason}}, nil
}

// AutoPause is the scheduler pausing a schedule that keeps failing.
func (s *Schedule) AutoPause(reason string, evidence json.RawMessage) ([]Payload, error) {
	if err := s.allowed("pause"); err != nil {
		return nil, err
	}
	return []Payload{SchedulePaused{Reason: reason, Auto: true, Evidence: evidence}}, nil
}

// Resume fires again from the first slot after now; the slots missed while
// paused are not fired.
func (s *Schedule) Resume(plan Plan, now time.Time, by string) ([]Payload, error) {
	if err := s.allowed("resume"); err != nil {
		return nil, err
	}
	next := s.next(plan, now, s.RegularRuns)
	return []Payload{ScheduleResumed{By: by, NextDueAt: next}}, nil
}

// Cancel ends the schedule for good.
func (s *Schedule) Cancel(by, reason string) ([]Payload, error) {
	if err := s.allowed("cancel"); err != nil {
		return nil, err
	}
	if err := maxLen("reason", reason, MaxReasonLen); err != nil {
		return nil, err
	}
	return []Payload{ScheduleCancelled{By: by, Reason: reason}}, nil
}

// RunNow fires an extra execution at now; the regular slots stay.
func (s *Schedule) RunNow(taskID string, now time.Time, by string) ([]Payload, error) {
	if err := s.allowed("run"); err != nil {
		return nil, err
	}
	return []Payload{ScheduleFired{DueAt: now.UTC(), Run: s.Runs + 1, TaskID: taskID, Manual: true, By: by,
		NextDueAt: s.NextDueAt}}, nil
}

// Slot is one due firing: the slot fired (the latest one due), how many
// earlier slots it stands for, and the slot after.
type Slot struct {
	Due    time.Time
	Missed int
}

// DueSlot is the slot to fire at now, false when the schedule is not due:
// every slot from NextDueAt up to now collapses into one firing of the
// latest of them (missed runs after downtime fire once).
func (s *Schedule) DueSlot(plan Plan, now time.Time) (Slot, bool) {
	if s.State != ScheduleStateActive || s.NextDueAt == nil || s.NextDueAt.After(now) {
		return Slot{}, false
	}
	last, n := plan.Last(*s.NextDueAt, now)
	if n == 0 { // the timing changed under the slot: fire the slot itself
		return Slot{Due: *s.NextDueAt}, true
	}
	return Slot{Due: last, Missed: n - 1}, true
}

// checkSlot makes sure slot is the one the schedule is due at.
func (s *Schedule) checkSlot(plan Plan, slot Slot, now time.Time) error {
	if err := s.allowed("fire"); err != nil {
		return err
	}
	want, ok := s.DueSlot(plan, now)
	if !ok || !want.Due.Equal(slot.Due) {
		return &ScheduleTransitionError{Command: "fire", State: "not due at " + ScheduleState(slot.Due.Format(time.RFC3339Nano))}
	}
	return nil
}

// Fire records a regular firing whose task (taskID) is created with it.
func (s *Schedule) Fire(plan Plan, slot Slot, now time.Time, taskID string) ([]Payload, error) {
	if err := s.checkSlot(plan, slot, now); err != nil {
		return nil, err
	}
	return []Payload{ScheduleFired{DueAt: slot.Due, Run: s.Runs + 1, TaskID: taskID, Missed: slot.Missed,
		NextDueAt: s.next(plan, now, s.RegularRuns+1)}}, nil
}

// Skip records a due slot not fired because the previous execution has not
// ended (overlap policy skip).
func (s *Schedule) Skip(plan Plan, slot Slot, now time.Time, blockingTaskID, reason string) ([]Payload, error) {
	if err := s.checkSlot(plan, slot, now); err != nil {
		return nil, err
	}
	return []Payload{ScheduleSkipped{DueAt: slot.Due, Missed: slot.Missed, Reason: reason,
		BlockingTaskID: blockingTaskID, NextDueAt: s.next(plan, now, s.RegularRuns)}}, nil
}

// FailFiring records a due slot whose task could not be made (reason), and
// pauses the schedule when that happened MaxFailures times in a row.
func (s *Schedule) FailFiring(plan Plan, slot Slot, now time.Time, reason string) ([]Payload, error) {
	if err := s.checkSlot(plan, slot, now); err != nil {
		return nil, err
	}
	out := []Payload{ScheduleFireFailed{DueAt: slot.Due, Missed: slot.Missed, Reason: reason,
		NextDueAt: s.next(plan, now, s.RegularRuns)}}
	if s.MaxFailures > 0 && s.ConsecutiveFireFailures+1 >= s.MaxFailures {
		evidence, _ := json.Marshal(map[string]any{"consecutive_fire_failures": s.ConsecutiveFireFailures + 1,
			"last_reason": reason, "due_at": slot.Due})
		out = append(out, SchedulePaused{Auto: true, Evidence: evidence,
			Reason: fmt.Sprintf("%d firings in a row could not create a task; the last: %s",
				s.ConsecutiveFireFailures+1, reason)})
	}
	return out, nil
}

// FailAlone records a due slot that could not be handled for a fault of
// this schedule's own (a timing stored before today's checks, a date no
// event can hold): the slot as failed, and an automatic pause, so that it
// stops failing while the other schedules fire on. An update fixes it; a
// resume fires it again.
func (s *Schedule) FailAlone(reason string) ([]Payload, error) {
	if err := s.allowed("fire"); err != nil {
		return nil, err
	}
	if s.NextDueAt == nil {
		return nil, &ScheduleTransitionError{Command: "fire", State: "not due"}
	}
	reason = cut(reason, MaxReasonLen)
	return []Payload{ScheduleFireFailed{DueAt: *s.NextDueAt, Reason: reason},
		SchedulePaused{Auto: true, Reason: reason}}, nil
}

// TaskParams is the task a firing creates (run is its execution number).
func (s *Schedule) TaskParams(run int) NewTaskParams {
	t := s.Task
	return NewTaskParams{Title: t.Title, Description: t.Description, Params: t.Params, Priority: t.Priority,
		AssignedTo: t.AssignedTo, AssignReason: "assigned by schedule " + s.Name,
		ScheduleID: s.ID, ScheduleRun: run}
}
