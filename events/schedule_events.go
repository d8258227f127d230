package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// StreamSchedule is the stream of one schedule: recurring work that creates
// tasks on its own (DESIGN §11).
const StreamSchedule = "schedule"

// Schedule stream payloads. Field names are the stored JSON: never rename, add.

// ScheduleCreated carries the whole definition, the anchor its slots count
// from and the first due time (nil: none, the schedule is finished).
type ScheduleCreated struct {
	ScheduleSpec
	Anchor    time.Time  `json:"anchor"`
	NextDueAt *time.Time `json:"next_due_at"`
	CreatedBy string     `json:"created_by,omitempty"`
}

// ScheduleUpdated carries the whole definition after the edit.
type ScheduleUpdated struct {
	ScheduleSpec
	Anchor    time.Time  `json:"anchor"`
	NextDueAt *time.Time `json:"next_due_at"`
	By        string     `json:"by,omitempty"`
}

// SchedulePaused: by an admin, or by the scheduler itself (Auto) after
// MaxFailures consecutive failed executions, with the evidence.
type SchedulePaused struct {
	By       string          `json:"by,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Auto     bool            `json:"auto,omitempty"`
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// ScheduleResumed carries the next due time counted from the resume (the
// slots missed while paused are not fired).
type ScheduleResumed struct {
	By        string     `json:"by,omitempty"`
	NextDueAt *time.Time `json:"next_due_at"`
}

type ScheduleCancelled struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ScheduleFired: the task TaskID (execution number Run) was created in the
// same transaction. DueAt is the slot fired; Missed counts the earlier
// slots it stands for after downtime. A manual run (Manual, By) is due when
// it was asked for and leaves NextDueAt as it was.
type ScheduleFired struct {
	DueAt     time.Time  `json:"due_at"`
	Run       int        `json:"run"`
	TaskID    string     `json:"task_id"`
	Missed    int        `json:"missed,omitempty"`
	Manual    bool       `json:"manual,omitempty"`
	By        string     `json:"by,omitempty"`
	NextDueAt *time.Time `json:"next_due_at"`
}

// ScheduleSkipped: the overlap policy is skip and the previous execution's
// retry chain has not ended.
type ScheduleSkipped struct {
	DueAt          time.Time  `json:"due_at"`
	Missed         int        `json:"missed,omitempty"`
	Reason         string     `json:"reason"`
	BlockingTaskID string     `json:"blocking_task_id,omitempty"`
	NextDueAt      *time.Time `json:"next_due_at"`
}

// ScheduleFireFailed: the template no longer makes a valid task (its type
// was archived, or its schema changed); nothing was created.
type ScheduleFireFailed struct {
	DueAt     time.Time  `json:"due_at"`
	Missed    int        `json:"missed,omitempty"`
	Reason    string     `json:"reason"`
	NextDueAt *time.Time `json:"next_due_at"`
}

func (ScheduleCreated) EventType() string    { return "schedule.created" }
func (ScheduleUpdated) EventType() string    { return "schedule.updated" }
func (SchedulePaused) EventType() string     { return "schedule.paused" }
func (ScheduleResumed) EventType() string    { return "schedule.resumed" }
func (ScheduleCancelled) EventType() string  { return "schedule.cancelled" }
func (ScheduleFired) EventType() string      { return "schedule.fired" }
func (ScheduleSkipped) EventType() string    { return "schedule.skipped" }
func (ScheduleFireFailed) EventType() string { return "schedule.fire_failed" }

func init() {
	register[ScheduleCreated]()
	register[ScheduleUpdated]()
	register[SchedulePaused]()
	register[ScheduleResumed]()
	register[ScheduleCancelled]()
	register[ScheduleFired]()
	register[ScheduleSkipped]()
	register[ScheduleFireFailed]()
}

// StreamVersion is the version of the last event folded into the aggregate.
func (s *Schedule) StreamVersion() int { return s.Version }

// scheduleSummary is Summary for the schedule stream.
func scheduleSummary(e Envelope, who func(string) string) (string, bool) {
	due := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }
	next := func(t *time.Time) string {
		if t == nil {
			return "no further firing"
		}
		return "next " + due(*t)
	}
	missed := func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf(" (for %d missed)", n)
	}
	switch p := e.Payload.(type) {
	case ScheduleCreated:
		return fmt.Sprintf("schedule %q created, %s", oneLine(p.Name, summaryTextLen), next(p.NextDueAt)), true
	case ScheduleUpdated:
		return fmt.Sprintf("schedule %q updated, %s", oneLine(p.Name, summaryTextLen), next(p.NextDueAt)), true
	case SchedulePaused:
		if p.Auto {
			return withText("paused automatically", p.Reason), true
		}
		return withText("paused by "+who(p.By), p.Reason), true
	case ScheduleResumed:
		return "resumed by " + who(p.By) + ", " + next(p.NextDueAt), true
	case ScheduleCancelled:
		return withText("cancelled by "+who(p.By), p.Reason), true
	case ScheduleFired:
		if p.Manual {
			return fmt.Sprintf("run #%d by %s: task %s", p.Run, who(p.By), p.TaskID), true
		}
		return fmt.Sprintf("fired #%d due %s%s: task %s", p.Run, due(p.DueAt), missed(p.Missed), p.TaskID), true
	case ScheduleSkipped:
		return withText(fmt.Sprintf("skipped the slot due %s%s", due(p.DueAt), missed(p.Missed)), p.Reason), true
	case ScheduleFireFailed:
		return withText(fmt.Sprintf("firing due %s failed%s", due(p.DueAt), missed(p.Missed)), p.Reason), true
	}
	return "", false
}
