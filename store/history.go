package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TaskAt is task id as it was at `at`: the fold of the longest prefix of its
// stream whose events occurred at or before at. A prefix, not a filter on
// occurred_at, so clocks that disagree across instances can never produce a
// state the task never had. Not found when the task did not exist yet.
func (db *DB) TaskAt(ctx context.Context, q Querier, id string, at time.Time) (*events.Task, error) {
	evs, err := db.TaskStream(ctx, q, id)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 || evs[0].StreamType != events.StreamTask {
		return nil, events.NotFound("task", id)
	}
	if c, ok := evs[0].Payload.(events.TaskCompacted); ok && evs[0].OccurredAt.After(at) {
		// Compacted: the snapshot holds from the task's last change on;
		// before it, only the archive knows.
		final := c.Task.UpdatedAt
		if at.Before(c.Task.CreatedAt) {
			return nil, fmt.Errorf("%w: task %s did not exist yet at %s (created %s)", events.ErrNotFound, id,
				at.UTC().Format(time.RFC3339Nano), c.Task.CreatedAt.Format(time.RFC3339Nano))
		}
		if at.Before(final) {
			return nil, fmt.Errorf("%w: %w: task %s was compacted at %s: only its final state (from %s) is kept here; its events before are in the archive (%s)",
				events.ErrNotFound, ErrCompacted, id, evs[0].OccurredAt.Format(time.RFC3339Nano), final.Format(time.RFC3339Nano), strings.Join(c.Archives, ", "))
		}
		return events.FoldTask(evs[:1]), nil
	}
	n := 0
	for n < len(evs) && !evs[n].OccurredAt.After(at) {
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: task %s did not exist yet at %s (created %s)", events.ErrNotFound, id,
			at.UTC().Format(time.RFC3339Nano), evs[0].OccurredAt.Format(time.RFC3339Nano))
	}
	return events.FoldTask(evs[:n]), nil
}

// ErrCompacted: the task's events before a time were compacted (ADR 035);
// it comes with events.ErrNotFound.
var ErrCompacted = errors.New("compacted")

// WorkerRef names a user (the worker of an attempt, the author of an update).
type WorkerRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func workerRef(id, name *string) *WorkerRef {
	if id == nil {
		return nil
	}
	r := &WorkerRef{ID: *id}
	if name != nil {
		r.Name = *name
	}
	return r
}

// ChainAttempt is one task of a retry lineage.
type ChainAttempt struct {
	TaskID     string        `json:"task_id"`
	Attempt    int           `json:"attempt"` // 1 is the original
	RetryCount int           `json:"retry_count"`
	Title      string        `json:"title"`
	Status     events.Status `json:"status"`
	// Worker is the last one to hold the task.
	Worker          *WorkerRef `json:"worker"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at"`
	CompletedAt     *time.Time `json:"completed_at"`
	DurationSeconds *float64   `json:"duration_seconds"`
	FailureKind     *string    `json:"failure_kind"`
	FailureReason   *string    `json:"failure_reason"`
	// Hint is what this attempt was told (task.retried on its parent).
	Hint         *string `json:"hint"`
	RetryOutcome *string `json:"retry_outcome"`
	// Data is what the attempt's workers uploaded.
	Data []events.TaskData `json:"data"`
}

// Chain is a task's whole retry lineage, original to latest.
type Chain struct {
	TaskID   string         `json:"task_id"`
	Attempts []ChainAttempt `json:"attempts"`
}

// maxChainDepth guards the recursive walks against a corrupt cycle; retries
// are bounded by the type's max_retries long before.
const maxChainDepth = 1000

// taskChain walks parent_task_id up to the root, then down through the
// children (one per parent: worker_tasks_one_retry), in one statement. A
// retry's hint is its parent's task.retried, written with the retry's
// creation: the read names occurred_at from then less ClockSkew, so a log
// partitioned by time scans only the partitions from there on as it runs.
const taskChain = `WITH RECURSIVE up AS (
    SELECT id, parent_task_id, 0 AS depth FROM worker_tasks WHERE id = $1
    UNION ALL
    SELECT p.id, p.parent_task_id, up.depth + 1 FROM worker_tasks p JOIN up ON p.id = up.parent_task_id
     WHERE up.depth < $2
), root AS (
    SELECT id FROM up ORDER BY depth DESC LIMIT 1
), down AS (
    SELECT id, 0 AS n FROM root
    UNION ALL
    SELECT c.id, down.n + 1 FROM worker_tasks c JOIN down ON c.parent_task_id = down.id WHERE down.n < $2
)
SELECT t.id, t.retry_count, t.title, t.status, t.assigned_to, u.full_name, t.created_at, t.started_at,
       t.completed_at, t.failure_kind, t.failure_reason, h.hint, t.retry_outcome
  FROM down JOIN worker_tasks t ON t.id = down.id
  LEFT JOIN users u ON u.id = t.assigned_to
  LEFT JOIN LATERAL (
    SELECT e.data->>'hint' AS hint FROM task_events e
     WHERE e.stream_id = t.parent_task_id AND e.type = 'task.retried'
       AND e.occurred_at >= t.created_at - interval '1 hour'
     ORDER BY e.version DESC LIMIT 1
  ) h ON true
 ORDER BY down.n`

// TaskChain returns the retry lineage that task id belongs to.
func (db *DB) TaskChain(ctx context.Context, q Querier, id string) (*Chain, error) {
	rows, err := q.Query(ctx, taskChain, id, maxChainDepth)
	if err != nil {
		return nil, mapErr(fmt.Errorf("task chain: %w", err))
	}
	attempts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChainAttempt, error) {
		var a ChainAttempt
		var workerID, workerName *string
		err := r.Scan(&a.TaskID, &a.RetryCount, &a.Title, &a.Status, &workerID, &workerName, &a.CreatedAt,
			&a.StartedAt, &a.CompletedAt, &a.FailureKind, &a.FailureReason, &a.Hint, &a.RetryOutcome)
		a.Attempt = a.RetryCount + 1
		a.Worker = workerRef(workerID, workerName)
		a.CreatedAt = a.CreatedAt.UTC()
		a.StartedAt, a.CompletedAt = utcPtr(a.StartedAt), utcPtr(a.CompletedAt)
		a.DurationSeconds = duration(a.StartedAt, a.CompletedAt)
		return a, err
	})
	if err != nil {
		return nil, mapErr(fmt.Errorf("task chain: %w", err))
	}
	if len(attempts) == 0 {
		return nil, events.NotFound("task", id)
	}
	ids := make([]string, len(attempts))
	for i, a := range attempts {
		ids[i] = a.TaskID
	}
	data, err := db.ListTaskData(ctx, ids...)
	if err != nil {
		return nil, err
	}
	for i := range attempts {
		attempts[i].Data = []events.TaskData{}
		for _, d := range data {
			if d.TaskID == attempts[i].TaskID {
				attempts[i].Data = append(attempts[i].Data, d)
			}
		}
	}
	return &Chain{TaskID: id, Attempts: attempts}, nil
}

// Bounds of previous_attempts, the context a retry's worker receives. They
// keep a claim response small (16 KiB of context at most) however long the
// lineage and however verbose the earlier attempts were. Texts are cut on a
// UTF-8 boundary and end with "…" when cut.
const (
	// MaxPreviousAttempts is how many earlier attempts are listed (the nearest).
	MaxPreviousAttempts = 10
	// AttemptUpdates is how many of an attempt's last thread messages are kept.
	AttemptUpdates = 5
	// AttemptMessageBytes cuts each message.
	AttemptMessageBytes = 500
	// AttemptReasonBytes cuts the failure reason and the hint.
	AttemptReasonBytes = 1000
	// AttemptResultBytes cuts the result; a cut result is sent as a JSON string.
	AttemptResultBytes = 2048
	// AttemptEvidenceBytes bounds the failure evidence; larger evidence is left out.
	AttemptEvidenceBytes = 1024
	// AttemptCompactBytes cuts reason and hint of an attempt sent compact.
	AttemptCompactBytes = 200
	// PreviousAttemptsBudget bounds the JSON of all attempts together. Every
	// attempt is listed compact (worker, outcome, failure, hint); then the
	// nearest get their details (updates, result, evidence, whole reason and
	// hint) while the budget lasts; if even the compact list does not fit, the
	// oldest are left out.
	PreviousAttemptsBudget = 16 << 10
)

// Attempt is one earlier attempt at a task, as the worker of a retry sees it.
type Attempt struct {
	TaskID  string        `json:"task_id"`
	Attempt int           `json:"attempt"` // 1 is the original
	Title   string        `json:"title"`
	Status  events.Status `json:"status"`
	// Worker is the last one to hold the attempt.
	Worker          *WorkerRef      `json:"worker"`
	StartedAt       *time.Time      `json:"started_at"`
	CompletedAt     *time.Time      `json:"completed_at"`
	DurationSeconds *float64        `json:"duration_seconds"`
	FailureKind     *string         `json:"failure_kind"`
	FailureReason   *string         `json:"failure_reason"`
	FailureEvidence json.RawMessage `json:"failure_evidence,omitempty"`
	// HintForNext is the advice given to the attempt after this one.
	HintForNext *string `json:"hint_for_next_attempt"`
	// LastUpdates are the attempt's last messages, oldest first;
	// UpdatesTotal counts them all.
	LastUpdates  []AttemptUpdate `json:"last_updates"`
	UpdatesTotal int             `json:"updates_total"`
	// Result is the posted result; when longer than AttemptResultBytes it is
	// a JSON string holding its beginning and ResultTruncated is set.
	Result          json.RawMessage `json:"result" openapi:"any"`
	ResultBytes     int             `json:"result_bytes,omitempty"`
	ResultTruncated bool            `json:"result_truncated,omitempty"`
	// DetailsOmitted: sent compact to stay within PreviousAttemptsBudget (no
	// updates, result or evidence; reason and hint cut shorter).
	DetailsOmitted bool `json:"details_omitted,omitempty"`
	// Data lists what the attempt uploaded (at most AttemptDataItems, in
	// compact form too: a retry continues from it); DataTotal counts all.
	// Download through GET /worker/tasks/{your task}/data/{id}.
	Data      []AttemptData `json:"data,omitempty"`
	DataTotal int           `json:"data_total,omitempty"`
}

// AttemptDataItems bounds the data listed per earlier attempt.
const AttemptDataItems = 20

// AttemptData is one file an earlier attempt uploaded.
type AttemptData struct {
	ID       string `json:"id"`
	DataType string `json:"data_type"`
	Filename string `json:"filename"`
	Size     int64  `json:"size_bytes"`
	SHA256   string `json:"sha256"`
}

// AttemptUpdate is one message of an earlier attempt's thread.
type AttemptUpdate struct {
	At        time.Time `json:"at"`
	Author    string    `json:"author"`
	Message   string    `json:"message"`
	Truncated bool      `json:"truncated,omitempty"`
}

// previousAttempts reads the ancestors of a retry in one statement: a
// recursive walk up parent_task_id from the parent, each ancestor with its
// worker's name, the hint and failure evidence from its events, and its last
// messages, all cut in SQL (by characters, at least the bytes wanted) so
// nothing large crosses the wire.
const previousAttempts = `WITH RECURSIVE up AS (
    SELECT id, parent_task_id, 1 AS depth FROM worker_tasks WHERE id = $1
    UNION ALL
    SELECT p.id, p.parent_task_id, up.depth + 1 FROM worker_tasks p JOIN up ON p.id = up.parent_task_id
     WHERE up.depth < $2
)
SELECT t.id, t.retry_count, t.title, t.status, t.assigned_to, u.full_name, t.started_at, t.completed_at,
       t.failure_kind, left(t.failure_reason, $3 + 1), ev.hint, ev.evidence,
       left(t.result::text, $4 + 1), octet_length(t.result::text),
       (SELECT count(*) FROM worker_task_updates w WHERE w.task_id = t.id),
       (SELECT coalesce(json_agg(json_build_object('at', l.created_at,
                  'author', coalesce(a.full_name, l.author_id::text, 'system'),
                  'message', left(l.message, $5 + 1)) ORDER BY l.version), '[]')
          FROM (SELECT * FROM worker_task_updates w WHERE w.task_id = t.id ORDER BY w.version DESC LIMIT $6) l
          LEFT JOIN users a ON a.id = l.author_id)
  FROM up JOIN worker_tasks t ON t.id = up.id
  LEFT JOIN users u ON u.id = t.assigned_to
  LEFT JOIN LATERAL (
    SELECT left((array_agg(e.data->>'hint' ORDER BY e.version DESC) FILTER (WHERE e.type = 'task.retried'))[1], $3 + 1) AS hint,
           (array_agg(e.data->'evidence' ORDER BY e.version DESC) FILTER (WHERE e.type = 'task.failed'))[1]::text AS evidence
      FROM task_events e WHERE e.stream_id = t.id AND e.type IN ('task.retried', 'task.failed')
       AND e.occurred_at >= t.created_at - interval '1 hour'
  ) ev ON true
 ORDER BY up.depth`

// PreviousAttempts returns the earlier attempts of a retry whose parent is
// parentID, oldest first, within the bounds above. Call it only for
// retries: originals have no parent.
func (db *DB) PreviousAttempts(ctx context.Context, q Querier, parentID string) ([]Attempt, error) {
	rows, err := q.Query(ctx, previousAttempts, parentID, MaxPreviousAttempts, AttemptReasonBytes,
		AttemptResultBytes, AttemptMessageBytes, AttemptUpdates)
	if err != nil {
		return nil, mapErr(fmt.Errorf("previous attempts: %w", err))
	}
	nearestFirst, err := pgx.CollectRows(rows, scanAttempt)
	if err != nil {
		return nil, mapErr(fmt.Errorf("previous attempts: %w", err))
	}
	if err := db.attachAttemptData(ctx, nearestFirst); err != nil {
		return nil, err
	}
	return fitAttempts(nearestFirst, PreviousAttemptsBudget), nil
}

func scanAttempt(r pgx.CollectableRow) (Attempt, error) {
	var a Attempt
	var workerID, workerName, evidence, result *string
	var resultBytes *int
	var updates []byte
	if err := r.Scan(&a.TaskID, &a.Attempt, &a.Title, &a.Status, &workerID, &workerName, &a.StartedAt,
		&a.CompletedAt, &a.FailureKind, &a.FailureReason, &a.HintForNext, &evidence, &result, &resultBytes,
		&a.UpdatesTotal, &updates); err != nil {
		return a, err
	}
	a.Attempt++ // from retry_count
	a.Worker = workerRef(workerID, workerName)
	a.StartedAt, a.CompletedAt = utcPtr(a.StartedAt), utcPtr(a.CompletedAt)
	a.DurationSeconds = duration(a.StartedAt, a.CompletedAt)
	a.FailureReason, _ = cutPtr(a.FailureReason, AttemptReasonBytes)
	a.HintForNext, _ = cutPtr(a.HintForNext, AttemptReasonBytes)
	if evidence != nil && *evidence != "null" && len(*evidence) <= AttemptEvidenceBytes {
		a.FailureEvidence = json.RawMessage(*evidence)
	}
	if result != nil {
		a.Result, a.ResultTruncated = cutJSON(*result, AttemptResultBytes)
		if a.ResultTruncated && resultBytes != nil {
			a.ResultBytes = *resultBytes
		}
	}
	if err := json.Unmarshal(updates, &a.LastUpdates); err != nil {
		return a, fmt.Errorf("decode updates of %s: %w", a.TaskID, err)
	}
	for i := range a.LastUpdates {
		u := &a.LastUpdates[i]
		u.At = u.At.UTC()
		u.Message, u.Truncated = cutText(u.Message, AttemptMessageBytes)
	}
	return a, nil
}

// cutText cuts s to at most n bytes on a UTF-8 boundary, marking a cut with
// an ellipsis.
func cutText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	cut := s[:n]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "…", true
}

func cutPtr(s *string, n int) (*string, bool) {
	if s == nil {
		return nil, false
	}
	c, cut := cutText(*s, n)
	return &c, cut
}

// cutJSON keeps a JSON text of at most n bytes as it is; a longer one becomes
// a JSON string of its beginning.
func cutJSON(s string, n int) (json.RawMessage, bool) {
	if len(s) <= n {
		return json.RawMessage(s), false
	}
	cut, _ := cutText(s, n)
	b, _ := json.Marshal(cut)
	return b, true
}

// compact is a without its details, for when the budget is short.
func compact(a Attempt) Attempt {
	a.LastUpdates, a.Result, a.FailureEvidence = []AttemptUpdate{}, nil, nil // an empty list, never null (the API contract)
	a.ResultTruncated, a.ResultBytes, a.DetailsOmitted = false, 0, true
	a.FailureReason, _ = cutPtr(a.FailureReason, AttemptCompactBytes)
	a.HintForNext, _ = cutPtr(a.HintForNext, AttemptCompactBytes)
	return a
}

// fitAttempts lists every attempt compact, leaving out the oldest if even
// that exceeds budget, then gives the nearest their details while the
// budget lasts. It returns them oldest first.
func fitAttempts(nearestFirst []Attempt, budget int) []Attempt {
	small := make([]Attempt, len(nearestFirst))
	sizes := make([]int, len(nearestFirst))
	used, n := 0, 0
	for i, a := range nearestFirst {
		small[i], sizes[i] = compact(a), jsonSize(compact(a))
		if used+sizes[i] > budget && i > 0 {
			break
		}
		used += sizes[i]
		n++
	}
	out := make([]Attempt, n)
	for i := range n {
		out[i] = small[i]
		full := nearestFirst[i]
		if extra := jsonSize(full) - sizes[i]; used+extra <= budget {
			out[i], used = full, used+extra
		}
	}
	slices.Reverse(out)
	return out
}

func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b) + 1 // the comma between elements
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func duration(start, end *time.Time) *float64 {
	if start == nil || end == nil || end.Before(*start) {
		return nil
	}
	d := end.Sub(*start).Seconds()
	return &d
}

// UserNames returns the full names of the users among ids; ids that name no
// user are absent from the map.
func (db *DB) UserNames(ctx context.Context, ids []string) (map[string]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT id::text, full_name FROM users WHERE id = ANY ($1::uuid[])`, ids)
	if err != nil {
		return nil, mapErr(fmt.Errorf("user names: %w", err))
	}
	out := make(map[string]string, len(ids))
	var id, name string
	_, err = pgx.ForEachRow(rows, []any{&id, &name}, func() error {
		out[id] = name
		return nil
	})
	return out, mapErr(err)
}

// logHead is the position of the last event visible to consumers: every
// event at or before it has committed, and none can appear there later.
// The output is named tx_num so that ORDER BY tx_id means the column, whose
// index answers in one probe (see eventColumns). It names the times it
// reads (headBounds).
func logHeadSQL(b timeBounds, args *[]any) string {
	return `SELECT tx_id::text::bigint AS tx_num, seq, occurred_at FROM task_events
  WHERE tx_id < pg_snapshot_xmin(pg_current_snapshot())` + b.render("occurred_at", args) + ` ORDER BY tx_id DESC, seq DESC LIMIT 1`
}

// headBounds is where a newest-first read of the log looks first: the last
// logWindow. An event found there is the newest of the whole log when it
// occurred ClockSkew after the window's start (every event after it in the
// log occurred at most ClockSkew before it), or when a log mark at or
// before it says so; else the read looks again with no bound.
func (db *DB) headBounds() timeBounds { return timeBounds{from: db.Now().Add(-logWindow)} }

// headSure says the newest event at pos, found in the window from, is the
// newest of the whole log.
func (db *DB) headSure(pos events.Position, at, from time.Time) bool {
	if !at.Before(from.Add(ClockSkew)) {
		return true
	}
	f, ok := db.logFloor(pos)
	return ok && !f.Before(from)
}

// LogHead returns the position of the last event consumers can see (the zero
// position for an empty log). Reading from it misses nothing that follows.
func (db *DB) LogHead(ctx context.Context, q Querier) (events.Position, error) {
	b := db.headBounds()
	for {
		var args []any
		var p events.Position
		var tx int64
		var at time.Time
		err := q.QueryRow(ctx, logHeadSQL(b, &args), args...).Scan(&tx, &p.Seq, &at)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if b.from.IsZero() {
				return events.Position{}, nil
			}
		case err != nil:
			return p, mapErr(fmt.Errorf("log head: %w", err))
		default:
			p.TxID = uint64(tx)
			if b.from.IsZero() || db.headSure(p, at, b.from) {
				return p, nil
			}
		}
		b = timeBounds{}
	}
}

// ReadLogPage is ReadLog for a reader that pages with a filter: it also
// returns where the next page starts. When the page is not full that is the
// log's head, read before the page, so a filter that matches little does
// not make the next call scan the same rows again. (Every event up to that
// head was visible to the page's read, which came after.) An unfiltered
// page that is not full ends with the head's event, so the head is not read
// for it: that read was planned over the partitions on each call, a
// quarter of PostgreSQL's time for a page of 500 events.
func (db *DB) ReadLogPage(ctx context.Context, q Querier, after events.Position, limit int, f LogFilter) ([]events.Envelope, events.Position, error) {
	var head events.Position
	if !f.matchesAll() {
		var err error
		if head, err = db.LogHead(ctx, q); err != nil {
			return nil, after, fmt.Errorf("read log page: %w", err)
		}
	}
	evs, err := db.ReadLog(ctx, q, after, limit, f)
	if err != nil {
		return nil, after, fmt.Errorf("read log page: %w", err)
	}
	next := after
	if len(evs) > 0 {
		next = evs[len(evs)-1].Position()
	}
	if len(evs) < limit && next.Less(head) {
		next = head
	}
	return evs, next, nil
}

// attachAttemptData lists each attempt's uploaded data (one query for all).
func (db *DB) attachAttemptData(ctx context.Context, attempts []Attempt) error {
	if len(attempts) == 0 {
		return nil
	}
	ids := make([]string, len(attempts))
	for i, a := range attempts {
		ids[i] = a.TaskID
	}
	data, err := db.ListTaskData(ctx, ids...)
	if err != nil {
		return err
	}
	for i := range attempts {
		a := &attempts[i]
		for _, d := range data {
			if d.TaskID != a.TaskID {
				continue
			}
			a.DataTotal++
			if len(a.Data) < AttemptDataItems {
				a.Data = append(a.Data, AttemptData{ID: d.ID, DataType: d.DataType, Filename: d.Filename, Size: d.Size, SHA256: d.SHA256})
			}
		}
	}
	return nil
}

// LogEnd is where a database's log ends: its head (LogHead) and its
// snapshot's xmin, which every event position read from it is below.
type LogEnd struct {
	Head events.Position
	XMin uint64
}

// Behind says the database is behind pos, a position read from its log or
// from an event stream: on one server neither ever happens (positions are
// read below the xmin, which only grows, and events stay), so pos comes from
// another server's log, such as that of a primary whose lagging standby was
// promoted and hands out the lost transaction ids again.
func (e LogEnd) Behind(pos events.Position) bool {
	return pos.TxID >= e.XMin || e.Head.Less(pos)
}

// ReadLogEnd reads where the log ends, head and xmin in one snapshot.
func (db *DB) ReadLogEnd(ctx context.Context, q Querier) (LogEnd, error) {
	b := db.headBounds()
	for {
		var end LogEnd
		var xmin int64
		var tx, seq *int64
		var at *time.Time
		var args []any
		err := q.QueryRow(ctx, `WITH h AS (`+logHeadSQL(b, &args)+`)
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, h.tx_num, h.seq, h.occurred_at FROM (SELECT 1) one LEFT JOIN h ON true`, args...).
			Scan(&xmin, &tx, &seq, &at)
		if err != nil {
			return end, mapErr(fmt.Errorf("log end: %w", err))
		}
		end.XMin = uint64(xmin)
		if tx != nil {
			end.Head = events.Position{TxID: uint64(*tx), Seq: *seq}
			if b.from.IsZero() || db.headSure(end.Head, *at, b.from) {
				return end, nil
			}
		} else if b.from.IsZero() {
			return end, nil
		}
		b = timeBounds{}
	}
}

// EventRef names one event read from a log: where it was and whose it was.
type EventRef struct {
	Pos      events.Position
	StreamID string
	Version  int
}

// LastHeld returns the greatest of refs that the database holds (the same
// position, stream and version); ok is false when it holds none. After a
// failover to a standby that lagged, that is where the new primary's log
// left the one the refs were read from.
func (db *DB) LastHeld(ctx context.Context, q Querier, refs []EventRef) (last events.Position, ok bool, err error) {
	txs, seqs, sids, versions := make([]int64, len(refs)), make([]int64, len(refs)), make([]string, len(refs)), make([]int, len(refs))
	for i, r := range refs {
		txs[i], seqs[i], sids[i], versions[i] = int64(r.Pos.TxID), r.Pos.Seq, r.StreamID, r.Version
	}
	var tx int64
	err = q.QueryRow(ctx, `SELECT e.tx_id::text::bigint AS tx_num, e.seq
  FROM unnest($1::bigint[], $2::bigint[], $3::uuid[], $4::int[]) AS r(tx, seq, sid, version)
  JOIN task_events e ON e.seq = r.seq AND e.tx_id = r.tx::text::xid8 AND e.stream_id = r.sid AND e.version = r.version
 ORDER BY e.tx_id DESC, e.seq DESC LIMIT 1`, txs, seqs, sids, versions).Scan(&tx, &last.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return events.Position{}, false, nil
	}
	if err != nil {
		return events.Position{}, false, mapErr(fmt.Errorf("last held: %w", err))
	}
	last.TxID = uint64(tx)
	return last, true, nil
}
