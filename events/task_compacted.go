package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// TaskCompacted replaces a finished task's events once they are past the
// retention and in a verified archive (ADR 035): the compaction appends it
// at the end of the log and deletes the events before it in the same
// transaction. It is a snapshot: folding it alone gives the task's final
// state, less the big payloads (params, result, thread messages,
// checkpoint), whose size and hash it keeps.
type TaskCompacted struct {
	// Task is the final state, params {} and result left out.
	Task Task `json:"task"`
	// Events is how many events it replaced, versions 1 to Task.Version,
	// seqs FirstSeq to LastSeq; Archives are the archive objects that hold
	// them in full.
	Events   int      `json:"events"`
	FirstSeq int64    `json:"first_seq"`
	LastSeq  int64    `json:"last_seq"`
	Archives []string `json:"archives,omitempty"`
	// Attempts are the task's claims, oldest first.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Decisions are the retry decisions on the task, in order (the retry
	// reactor's, and an admin's manual retry, which may follow it): the
	// state keeps only the last outcome, and what-if replay (ADR 030)
	// needs each, with the skip's reason and whether a retry was manual.
	Decisions []RetryDecision `json:"decisions,omitempty"`
	// Evidence is the stuck detector's, when the task ended in a
	// worker_offline failure (what-if replay re-times it; a compaction
	// written before it was kept has none). Beside the attempts, so that
	// the one attempt the state says is still left out.
	Evidence *OfflineEvidence `json:"evidence,omitempty"`
	// CreatedAvailableAt is when the task.created event made the task
	// claimable, when an edit moved the state's AvailableAt since (what-if
	// replay times a retry's backoff from it).
	CreatedAvailableAt *time.Time `json:"created_available_at,omitempty"`
	// Params, Result and Checkpoint describe the dropped payloads.
	Params     *Digest `json:"params,omitempty"`
	Result     *Digest `json:"result,omitempty"`
	Checkpoint *Digest `json:"checkpoint,omitempty"`
	// Updates counts the dropped thread messages, UpdateBytes their text.
	Updates     int `json:"updates,omitempty"`
	UpdateBytes int `json:"update_bytes,omitempty"`
	// Data are the task's data objects (the index; the objects stay in the
	// data store until their own retention removes them).
	Data []TaskData `json:"data,omitempty"`
	// Usage are the replaced LLM usage reports, which the usage tables
	// sum: replay sums them as if they were the events. The other sums
	// (completions per worker and day, the per-minute counters) count
	// one event a finished task has exactly one of, which Task says
	// (store/replay's countedEvents).
	Usage []Counted `json:"usage,omitempty"`
}

// Attempt is one claim of a task: who held it, for how long, how it ended.
type Attempt struct {
	WorkerID  string    `json:"worker_id"`
	ClaimedAt time.Time `json:"claimed_at"`
	// DurationMS is from the claim to its end.
	DurationMS int64 `json:"duration_ms"`
	// Outcome: completed, failed, released or cancelled; "" while held
	// (a chain is compacted only finished, so never in a stored event).
	Outcome     string `json:"outcome,omitempty"`
	FailureKind string `json:"failure_kind,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// OfflineEvidence is the part of a worker_offline failure's evidence that
// what-if replay re-decides the detector's rule from, as the failure's
// event had it.
type OfflineEvidence struct {
	LastHeartbeat           string `json:"last_heartbeat,omitempty"`
	OfflineThresholdSeconds int    `json:"offline_threshold_seconds,omitempty"`
	StuckThresholdSeconds   int    `json:"stuck_threshold_seconds,omitempty"`
}

// RetryDecision is one retry decision on a failed task.
type RetryDecision struct {
	Outcome string    `json:"outcome"` // retried, skipped or exhausted
	At      time.Time `json:"at"`
	Manual  bool      `json:"manual,omitempty"`
	// Reason is a skip's (cut to 500 characters).
	Reason string `json:"reason,omitempty"`
}

// Digest is the size and SHA-256 of a dropped JSON payload, as stored
// (the result's; the params' and the checkpoint's keep their size only).
type Digest struct {
	Size   int    `json:"size_bytes"`
	SHA256 string `json:"sha256,omitempty"`
}

// Counted is a replaced event that a sum table counts.
type Counted struct {
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurred_at"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// MarshalJSON writes the task's state without what the event says
// otherwise (its id is the stream's, its version the event's less one,
// params and result dropped), without empty fields, without available_at
// and updated_at when they equal created_at and completed_at, and without
// the attempts when there is one that the state says (its worker, start,
// end and outcome): a compaction must be much smaller than the events it
// replaces. UnmarshalJSON fills them back.
func (p TaskCompacted) MarshalJSON() ([]byte, error) {
	type plain TaskCompacted
	task, err := json.Marshal(p.Task)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(task, &fields); err != nil {
		return nil, err
	}
	for k, v := range fields {
		if string(v) == "null" {
			delete(fields, k) // a nil pointer: "" or 0 behind one is kept
		}
	}
	// The plain fields at their zero value, and the times that repeat.
	for k, zero := range map[string]string{"scheduled": "false", "retry_count": "0", "description": `""`} {
		if string(fields[k]) == zero {
			delete(fields, k)
		}
	}
	if string(fields["available_at"]) == string(fields["created_at"]) {
		delete(fields, "available_at")
	}
	if string(fields["updated_at"]) == string(fields["completed_at"]) {
		delete(fields, "updated_at")
	}
	for _, k := range []string{"id", "version", "params", "result"} {
		delete(fields, k)
	}
	slim, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	q := plain(p)
	if a, ok := impliedAttempt(&p.Task); ok && len(p.Attempts) == 1 && p.Attempts[0] == a {
		q.Attempts = nil
	}
	return json.Marshal(struct {
		Task json.RawMessage `json:"task"`
		plain
	}{slim, q})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *TaskCompacted) UnmarshalJSON(b []byte) error {
	type plain TaskCompacted
	var q plain
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	t := &q.Task
	if t.AvailableAt.IsZero() {
		t.AvailableAt = t.CreatedAt
	}
	if t.UpdatedAt.IsZero() && t.CompletedAt != nil {
		t.UpdatedAt = *t.CompletedAt
	}
	if len(q.Attempts) == 0 {
		if a, ok := impliedAttempt(t); ok {
			q.Attempts = []Attempt{a}
		}
	}
	*p = TaskCompacted(q)
	return nil
}

// impliedAttempt is the one attempt a finished task's state describes:
// its holder, from its start to its end, with its outcome.
func impliedAttempt(t *Task) (Attempt, bool) {
	if t.AssignedTo == nil || t.StartedAt == nil || t.CompletedAt == nil || t.Status == StatusCancelled {
		return Attempt{}, false
	}
	a := Attempt{WorkerID: *t.AssignedTo, ClaimedAt: *t.StartedAt, DurationMS: t.CompletedAt.Sub(*t.StartedAt).Milliseconds(),
		Outcome: string(t.Status)}
	if t.Status == StatusFailed {
		if t.FailureKind != nil {
			a.FailureKind = *t.FailureKind
		}
		if t.FailureReason != nil {
			a.Reason = cut(*t.FailureReason, 500)
		}
	}
	return a, true
}

func (TaskCompacted) EventType() string { return "task.compacted" }

func init() { register[TaskCompacted]() }

// Compactable says why a finished task's stream may not be compacted, or
// "" when it may: it has ended for good (a failure's retry is decided) and
// nothing happened to it since cutoff.
func (t *Task) Compactable(cutoff time.Time) string {
	switch {
	case !t.Status.Terminal():
		return "the task is " + string(t.Status)
	case t.Status == StatusFailed && t.RetryOutcome == nil:
		return "its retry is not decided yet"
	case !t.UpdatedAt.Before(cutoff):
		return "it changed after the retention's start"
	}
	return ""
}

// CompactTask builds the event that replaces stream, a task's whole
// history in version order (no earlier compaction in it but as its first
// event). seqs are the events' positions.
func CompactTask(stream []Envelope, archives []string) (TaskCompacted, error) {
	if len(stream) == 0 {
		return TaskCompacted{}, fmt.Errorf("compact: empty stream")
	}
	var out TaskCompacted
	t := &Task{}
	var checkpoint json.RawMessage
	var createdAvailable time.Time
	for i, e := range stream {
		if e.Version != i+1 && !(i == 0 && e.Type == (TaskCompacted{}).EventType()) {
			return out, fmt.Errorf("compact task %s: event %d is version %d, expected %d", e.StreamID, e.Seq, e.Version, i+1)
		}
		t.Apply(e)
		switch p := e.Payload.(type) {
		case TaskCompacted:
			// An earlier compaction's record carries on (a manual retry
			// after it appended more).
			out.Attempts = append(out.Attempts, p.Attempts...)
			out.Params, out.Result, out.Checkpoint = p.Params, p.Result, p.Checkpoint
			out.Updates, out.UpdateBytes = p.Updates, p.UpdateBytes
			out.Usage = append(out.Usage, p.Usage...)
			out.Archives = append(out.Archives, p.Archives...)
			out.Events += p.Events
			out.FirstSeq = p.FirstSeq
			out.Decisions = append(out.Decisions, p.Decisions...)
			out.Evidence = p.Evidence
			createdAvailable = p.Task.AvailableAt
			if p.CreatedAvailableAt != nil {
				createdAvailable = *p.CreatedAvailableAt
			}
		case TaskCreated:
			createdAvailable = e.OccurredAt
			if p.AvailableAt != nil {
				createdAvailable = p.AvailableAt.UTC()
			}
		case TaskRetried:
			out.Decisions = append(out.Decisions, RetryDecision{Outcome: RetryOutcomeRetried, At: e.OccurredAt, Manual: p.Manual})
		case TaskRetrySkipped:
			out.Decisions = append(out.Decisions, RetryDecision{Outcome: RetryOutcomeSkipped, At: e.OccurredAt, Reason: cut(p.Reason, 500)})
		case TaskRetriesExhausted:
			out.Decisions = append(out.Decisions, RetryDecision{Outcome: RetryOutcomeExhausted, At: e.OccurredAt})
		case TaskClaimed:
			out.Attempts = append(out.Attempts, Attempt{WorkerID: p.WorkerID, ClaimedAt: e.OccurredAt})
		case TaskReleased:
			endAttempt(&out, e.OccurredAt, "released", "", p.Reason)
		case TaskCompleted:
			endAttempt(&out, e.OccurredAt, "completed", "", "")
		case TaskFailed:
			endAttempt(&out, e.OccurredAt, "failed", p.Kind, p.Reason)
			if p.Kind == FailureWorkerOffline {
				out.Evidence = offlineEvidence(p.Evidence)
			}
		case TaskCancelled:
			endAttempt(&out, e.OccurredAt, "cancelled", "", p.Reason)
		case TaskUsageReported:
			out.Usage = append(out.Usage, Counted{Type: e.Type, OccurredAt: e.OccurredAt, Data: e.Data})
		case TaskUpdatePosted:
			out.Updates++
			out.UpdateBytes += len(p.Message)
		case TaskCheckpointed:
			checkpoint = p.State
		}
		if e.Type != (TaskCompacted{}).EventType() {
			out.Events++
			if out.FirstSeq == 0 {
				out.FirstSeq = e.Seq
			}
		}
		out.LastSeq = e.Seq
	}
	if len(t.Params) > 0 && string(t.Params) != "{}" {
		out.Params = &Digest{Size: len(t.Params)}
	}
	if len(t.Result) > 0 {
		out.Result = digest(t.Result)
	}
	if len(checkpoint) > 0 {
		out.Checkpoint = &Digest{Size: len(checkpoint)}
	}
	t.Params = json.RawMessage(`{}`)
	t.Result = nil
	out.Task = *t
	if !createdAvailable.IsZero() && !createdAvailable.Equal(t.AvailableAt) {
		out.CreatedAvailableAt = &createdAvailable
	}
	out.Archives = dedupe(out.Archives, archives)
	return out, nil
}

// offlineEvidence keeps what what-if replay reads of a detector's
// evidence (store/whatif reads the same fields of a live event).
func offlineEvidence(raw json.RawMessage) *OfflineEvidence {
	var ev struct {
		LastHeartbeat any         `json:"last_heartbeat"`
		Offline       json.Number `json:"offline_threshold_seconds"`
		Stuck         json.Number `json:"stuck_threshold_seconds"`
	}
	out := &OfflineEvidence{}
	if json.Unmarshal(raw, &ev) != nil {
		return out
	}
	if s, ok := ev.LastHeartbeat.(string); ok {
		out.LastHeartbeat = s
	}
	o, _ := ev.Offline.Int64()
	st, _ := ev.Stuck.Int64()
	out.OfflineThresholdSeconds, out.StuckThresholdSeconds = int(o), int(st)
	return out
}

func endAttempt(out *TaskCompacted, at time.Time, outcome, kind, reason string) {
	n := len(out.Attempts)
	if n == 0 || out.Attempts[n-1].Outcome != "" {
		return // no claim open (a cancel or release of a pending task)
	}
	a := &out.Attempts[n-1]
	a.DurationMS = at.Sub(a.ClaimedAt).Milliseconds()
	a.Outcome, a.FailureKind, a.Reason = outcome, kind, cut(reason, 500)
}

func digest(b []byte) *Digest {
	sum := sha256.Sum256(b)
	return &Digest{Size: len(b), SHA256: hex.EncodeToString(sum[:])}
}

func dedupe(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// compactedSummary says what a compaction kept and dropped, for the
// timeline of a compacted task.
func compactedSummary(p TaskCompacted, who func(string) string) string {
	s := fmt.Sprintf("compacted %d events", p.Events)
	if len(p.Archives) > 0 {
		s += " (in full in the archive " + strings.Join(p.Archives, ", ") + ")"
	}
	kept := []string{"final state " + string(p.Task.Status)}
	if n := len(p.Attempts); n > 0 {
		parts := make([]string, 0, n)
		for _, a := range p.Attempts {
			d := a.Outcome
			if a.FailureKind != "" {
				d += " (" + a.FailureKind + ")"
			}
			parts = append(parts, fmt.Sprintf("%s %s in %s", who(a.WorkerID), d, time.Duration(a.DurationMS)*time.Millisecond))
		}
		kept = append(kept, fmt.Sprintf("%d attempts: %s", n, strings.Join(parts, "; ")))
	}
	if p.Result != nil {
		kept = append(kept, fmt.Sprintf("result size %d bytes, sha256 %s", p.Result.Size, p.Result.SHA256))
	}
	var reports, tokens int64
	for _, c := range p.Usage {
		if c.Type == (TaskUsageReported{}).EventType() {
			var u TaskUsageReported
			if json.Unmarshal(c.Data, &u) == nil {
				reports++
				tokens += u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
			}
		}
	}
	if reports > 0 {
		kept = append(kept, fmt.Sprintf("usage %d reports, %d tokens", reports, tokens))
	}
	if len(p.Data) > 0 {
		kept = append(kept, fmt.Sprintf("%d data objects", len(p.Data)))
	}
	var dropped []string
	if p.Params != nil {
		dropped = append(dropped, fmt.Sprintf("params (%d bytes)", p.Params.Size))
	}
	if p.Result != nil {
		dropped = append(dropped, "the result")
	}
	if p.Updates > 0 {
		dropped = append(dropped, fmt.Sprintf("%d thread messages", p.Updates))
	}
	if p.Checkpoint != nil {
		dropped = append(dropped, fmt.Sprintf("the checkpoint (%d bytes)", p.Checkpoint.Size))
	}
	s += "; kept " + strings.Join(kept, ", ")
	if len(dropped) > 0 {
		s += "; dropped " + strings.Join(dropped, ", ")
	}
	return s
}
