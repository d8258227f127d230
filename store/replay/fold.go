package replay

import (
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// fold is part of the log folded in memory: one aggregate per stream of
// the part read and the rows that single events produce (thread messages,
// assignments). A fold never holds more than one range of streams
// (partition.go), so memory does not grow with the log.
type fold struct {
	tasks       map[key]*events.Task
	types       map[key]*events.TaskType
	users       map[key]*events.User
	updates     [][]any
	assignments [][]any
	schedules   map[key]*events.Schedule
	firings     [][]any
	data        map[key]*events.TaskData       // task_data rows by data id
	checkpoints map[key]*events.TaskCheckpoint // task_checkpoints rows by task id
	rules       map[key]*events.FreshnessRule
	workflows   map[key]*events.Workflow
	ruleKeys    map[key]map[string]events.KeyState // each rule's watchlist
	held        map[key][]events.Envelope          // events waiting for their predecessor
	// compacted is the version of each task's task.compacted (the latest):
	// the rows its earlier events made (thread, assignments) are dropped,
	// as the compaction dropped them live.
	compacted map[key]int
	events    int64
	skipped   int64 // events of streams no projection reads
}

// key is a stream id's 16 bytes: cheaper to hash than its 36-character
// text, and sorted the same way.
type key [16]byte

// text is the canonical form of a UUID.
func (k key) text() string {
	var b [36]byte
	hex.Encode(b[0:8], k[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], k[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], k[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], k[8:10])
	b[23] = '-'
	hex.Encode(b[24:], k[10:])
	return string(b[:])
}

func newFold() *fold {
	return &fold{
		tasks:       map[key]*events.Task{},
		types:       map[key]*events.TaskType{},
		users:       map[key]*events.User{},
		schedules:   map[key]*events.Schedule{},
		data:        map[key]*events.TaskData{},
		checkpoints: map[key]*events.TaskCheckpoint{},
		rules:       map[key]*events.FreshnessRule{},
		workflows:   map[key]*events.Workflow{},
		ruleKeys:    map[key]map[string]events.KeyState{},
		held:        map[key][]events.Envelope{},
		compacted:   map[key]int{},
	}
}

// apply folds one decoded event of stream k. e.StreamID may be empty: it is
// filled from the aggregate (one string per stream, not per event).
//
// Streams may interleave in any order, and within a stream an event may
// arrive before its predecessor: the log is read in heap order, which is
// not seq order (a concurrent insert can land on an earlier page). Such an
// event is held until the versions before it are folded; finish reports a
// version that never came. A version that comes twice is an error at once:
// a silently wrong rebuild is worse than none.
func (f *fold) apply(e events.Envelope, k key) error {
	f.events++
	if !knownStream(e.StreamType) {
		f.skipped++
		return nil
	}
	applied, err := f.next(e, k)
	if err != nil || !applied || len(f.held) == 0 {
		return err
	}
	// Fold the events of k that were waiting for this one.
	for {
		held := f.held[k]
		i := slices.IndexFunc(held, func(h events.Envelope) bool { return h.Version == e.Version+1 })
		if i < 0 {
			return nil
		}
		e = held[i]
		if held = slices.Delete(held, i, i+1); len(held) == 0 {
			delete(f.held, k)
		} else {
			f.held[k] = held
		}
		if _, err := f.next(e, k); err != nil {
			return err
		}
	}
}

// next folds e if it is its stream's next version, holds it if it comes
// early, and fails if its version was folded already.
func (f *fold) next(e events.Envelope, k key) (bool, error) {
	switch e.StreamType {
	case events.StreamTask:
		t := f.tasks[k]
		if ok, err := f.inOrder(e, k, t != nil, func() int { return t.Version }); !ok {
			return false, err
		}
		if t == nil {
			t = &events.Task{ID: k.text()}
			f.tasks[k] = t
		}
		e.StreamID = t.ID
		t.Apply(e)
		if p, ok := e.Payload.(events.TaskCompacted); ok {
			f.applyCompacted(e, k, p)
		}
		if row := projections.UpdateRow(e); row != nil {
			f.updates = append(f.updates, row)
		}
		if row := projections.AssignmentRow(e); row != nil {
			f.assignments = append(f.assignments, row)
		}
		f.applyData(e)
		if p, ok := e.Payload.(events.TaskCheckpointed); ok {
			c := f.checkpoints[k]
			if c == nil {
				c = &events.TaskCheckpoint{}
				f.checkpoints[k] = c
			}
			c.ApplyCheckpoint(e, p)
		}
	case events.StreamTaskType:
		tt := f.types[k]
		if ok, err := f.inOrder(e, k, tt != nil, func() int { return tt.Version }); !ok {
			return false, err
		}
		if tt == nil {
			tt = &events.TaskType{ID: k.text()}
			f.types[k] = tt
		}
		e.StreamID = tt.ID
		tt.Apply(e)
	case events.StreamUser:
		u := f.users[k]
		if ok, err := f.inOrder(e, k, u != nil, func() int { return u.Version }); !ok {
			return false, err
		}
		if u == nil {
			u = &events.User{ID: k.text()}
			f.users[k] = u
		}
		e.StreamID = u.ID
		u.Apply(e)
	case events.StreamSchedule:
		s := f.schedules[k]
		if ok, err := f.inOrder(e, k, s != nil, func() int { return s.Version }); !ok {
			return false, err
		}
		if s == nil {
			s = &events.Schedule{ID: k.text()}
			f.schedules[k] = s
		}
		e.StreamID = s.ID
		s.Apply(e)
		if row := projections.FiringRow(e); row != nil {
			f.firings = append(f.firings, row)
		}
	case events.StreamFreshnessRule:
		r := f.rules[k]
		if ok, err := f.inOrder(e, k, r != nil, func() int { return r.Version }); !ok {
			return false, err
		}
		if r == nil {
			r = &events.FreshnessRule{ID: k.text()}
			f.rules[k] = r
		}
		e.StreamID = r.ID
		r.Apply(e)
		f.ruleKeys[k] = events.ApplyKeys(f.ruleKeys[k], e)
	case events.StreamWorkflow:
		w := f.workflows[k]
		if ok, err := f.inOrder(e, k, w != nil, func() int { return w.Version }); !ok {
			return false, err
		}
		if w == nil {
			w = &events.Workflow{ID: k.text()}
			f.workflows[k] = w
		}
		e.StreamID = w.ID
		w.Apply(e)
	}
	return true, nil
}

// inOrder reports whether e is the next version of its stream (at version
// have(), or 0 when !exists); an early event is held.
func (f *fold) inOrder(e events.Envelope, k key, exists bool, have func() int) (bool, error) {
	v := 0
	if exists {
		v = have()
	}
	switch {
	case e.Version == v+1:
		return true, nil
	case e.Version > v+1 && e.Type == compactedType:
		// A snapshot: the events it replaced are gone from the log (or,
		// read from an archive, came first).
		return true, nil
	case e.Version <= f.compacted[k]:
		// Replaced by a compaction already folded: an archived event read
		// after it adds nothing.
		return false, nil
	case e.Version > v+1:
		f.held[k] = append(f.held[k], e)
		return false, nil
	}
	return false, fmt.Errorf("replay: event %d is version %d of %s %s, which is already at version %d",
		e.Seq, e.Version, e.StreamType, k.text(), v)
}

// finish checks that no event is still waiting for its predecessor.
func (f *fold) finish() error {
	for k, held := range f.held {
		first := held[0]
		for _, h := range held {
			if h.Version < first.Version {
				first = h
			}
		}
		return fmt.Errorf("replay: %s %s has version %d (event %d) but not version %d: the log has a gap (%d streams wait)",
			first.StreamType, k.text(), first.Version, first.Seq, f.version(first.StreamType, k)+1, len(f.held))
	}
	return nil
}

// version is the stream's folded version, 0 when it has none yet.
func (f *fold) version(streamType string, k key) int {
	switch streamType {
	case events.StreamTask:
		if t, ok := f.tasks[k]; ok {
			return t.Version
		}
	case events.StreamTaskType:
		if tt, ok := f.types[k]; ok {
			return tt.Version
		}
	case events.StreamUser:
		if u, ok := f.users[k]; ok {
			return u.Version
		}
	case events.StreamSchedule:
		if s, ok := f.schedules[k]; ok {
			return s.Version
		}
	case events.StreamFreshnessRule:
		if r, ok := f.rules[k]; ok {
			return r.Version
		}
	case events.StreamWorkflow:
		if w, ok := f.workflows[k]; ok {
			return w.Version
		}
	}
	return 0
}

var compactedType = events.TaskCompacted{}.EventType()

// applyCompacted folds a compaction's rows: its data rows are the task's,
// its checkpoint is gone, and the events it replaced that still wait
// (read out of order from an archive) never will be folded.
func (f *fold) applyCompacted(e events.Envelope, k key, p events.TaskCompacted) {
	f.compacted[k] = e.Version
	if c := f.checkpoints[k]; c != nil && c.Version < e.Version {
		delete(f.checkpoints, k)
	}
	for i := range p.Data {
		d := p.Data[i]
		if dk, err := parseKey(d.ID); err == nil {
			f.data[dk] = &d
		}
	}
	if held := f.held[k]; len(held) > 0 {
		held = slices.DeleteFunc(held, func(h events.Envelope) bool { return h.Version < e.Version })
		if len(held) == 0 {
			delete(f.held, k)
		} else {
			f.held[k] = held
		}
	}
}

// uncompacted drops from rows (one per event: task id at column idCol,
// its version at versionCol) those a compaction replaced.
func (f *fold) uncompacted(rows [][]any, idCol, versionCol int) [][]any {
	if len(f.compacted) == 0 {
		return rows
	}
	out := make([][]any, 0, len(rows))
	for _, r := range rows {
		id, _ := r[idCol].(string)
		k, err := parseKey(id)
		if err == nil {
			if cv, ok := f.compacted[k]; ok && r[versionCol].(int) < cv {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

func knownStream(t string) bool {
	return t == events.StreamTask || t == events.StreamTaskType || t == events.StreamUser ||
		t == events.StreamSchedule || t == events.StreamFreshnessRule || t == events.StreamWorkflow
}

// applyData folds a task's data events into the task_data rows: an upload
// adds or replaces its row, a deletion removes it.
func (f *fold) applyData(e events.Envelope) {
	switch p := e.Payload.(type) {
	case events.TaskDataUploaded:
		k, err := parseKey(p.DataID)
		if err != nil {
			return // ids are UUIDs the service wrote
		}
		d := f.data[k]
		if d == nil {
			d = &events.TaskData{}
			f.data[k] = d
		}
		d.ApplyUpload(e, p)
	case events.TaskDataDeleted:
		if k, err := parseKey(p.DataID); err == nil {
			delete(f.data, k)
		}
	}
}

func parseKey(s string) (key, error) {
	id, err := uuid.Parse(s)
	return key(id), err
}
