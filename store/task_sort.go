package store

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clawdbot/task-service/events"
)

// TaskSort is an order of the task list. Each is read in an index's order,
// so a page costs the same on any size of history (migration 031, ADR 024).
type TaskSort string

const (
	SortNewest TaskSort = ""       // created, newest first
	SortOldest TaskSort = "oldest" // created, oldest first
	// SortStarted lists the tasks in progress or ended after a start,
	// latest start first.
	SortStarted TaskSort = "started"
	// SortLongest lists the ended tasks that ran, longest run first.
	SortLongest TaskSort = "longest"
)

// TaskSorts are the list's orders, the default first.
var TaskSorts = []TaskSort{SortNewest, SortOldest, SortStarted, SortLongest}

// sortSpec is how a sort reads the list.
type sortSpec struct {
	key string // the keyset expression on worker_tasks t, with t.id after it
	asc bool
	// statuses the sort lists, one index scan each, merged; nil: every
	// status, one scan.
	statuses []events.Status
	cond     string // what a row needs to be listed, besides its status
}

var ended = []events.Status{events.StatusCompleted, events.StatusFailed, events.StatusCancelled}

var sortSpecs = map[TaskSort]sortSpec{
	SortNewest: {key: "t.created_at"},
	SortOldest: {key: "t.created_at", asc: true},
	// Tasks in progress come from worker_tasks_held, read whole (they are
	// bounded by the workers' capacity); the ended from worker_tasks_started.
	SortStarted: {key: "t.started_at", statuses: append([]events.Status{events.StatusInProgress}, ended...),
		cond: "t.started_at IS NOT NULL"},
	SortLongest: {key: "(t.completed_at - t.started_at)", statuses: ended,
		cond: "t.started_at IS NOT NULL AND t.completed_at IS NOT NULL"},
}

// Valid says whether s is one of TaskSorts.
func (s TaskSort) Valid() bool {
	_, ok := sortSpecs[s]
	return ok
}

func (s TaskSort) spec() sortSpec { return sortSpecs[s] }

// order is the ORDER BY of the sort.
func (sp sortSpec) order() string {
	dir := " DESC"
	if sp.asc {
		dir = " ASC"
	}
	return sp.key + dir + ", t.id" + dir
}

// checkFilter refuses the filters no index serves in this order: the
// started and longest orders take the status filter only, and a status
// they list.
func (s TaskSort) checkFilter(f TaskFilter) error {
	sp := s.spec()
	if sp.statuses == nil {
		return nil
	}
	other := f.TaskTypeID != "" || f.Priority != "" || f.AssignedTo != "" || f.Unassigned || f.Retries ||
		f.Stuck || f.Search != "" || f.Cancellable || f.Retryable
	if other {
		return events.Invalid("sort", "%s combines with the status filter only: clear the other filters or sort by created", s)
	}
	if f.Status != "" && !slices.Contains(sp.statuses, f.Status) {
		return events.Invalid("sort", "%s lists tasks that are %s, not %s ones", s, statusList(sp.statuses), f.Status)
	}
	return nil
}

func statusList(ss []events.Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Cursor is the keyset position after a task in the list's default order.
func Cursor(t *events.Task) string { return SortNewest.Cursor(t) }

// Cursor is the keyset position after t in this order. The default order's
// cursor is the created time and id; the others name their order first, so
// a cursor of one order is refused by another.
func (s TaskSort) Cursor(t *events.Task) string {
	var key string
	switch s {
	case SortStarted:
		key = t.StartedAt.UTC().Format(time.RFC3339Nano)
	case SortLongest:
		key = strconv.FormatInt(t.CompletedAt.Sub(*t.StartedAt).Microseconds(), 10)
	default:
		key = t.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	if s != SortNewest {
		key = string(s) + "|" + key
	}
	return encodeCursor(key, t.ID)
}

// CheckCursor checks that s is a cursor of the task list (field "after").
func CheckCursor(s string) error {
	_, _, err := SortNewest.parseCursor(s)
	return err
}

// parseCursor reads a cursor of this order: its key (a time, or a run time
// for SortLongest) and the task id.
func (s TaskSort) parseCursor(c string) (any, string, error) {
	bad := events.Invalid("after", "not a cursor from this list")
	key, id, err := decodeCursor(c)
	if err != nil {
		return nil, "", err
	}
	if s != SortNewest {
		var ok bool
		if key, ok = strings.CutPrefix(key, string(s)+"|"); !ok {
			return nil, "", bad
		}
	}
	if s == SortLongest {
		us, err := strconv.ParseInt(key, 10, 64)
		if err != nil {
			return nil, "", bad
		}
		return time.Duration(us) * time.Microsecond, id, nil
	}
	at, err := time.Parse(time.RFC3339Nano, key)
	if err != nil {
		return nil, "", bad
	}
	return at, id, nil
}
