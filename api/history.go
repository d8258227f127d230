package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// EventView is one event as the API shows it: the stored event plus who
// caused it (with a display name), its causation and a one-line summary.
type EventView struct {
	Seq           int64           `json:"seq"`
	Position      string          `json:"position"`
	StreamType    string          `json:"stream_type"`
	StreamID      string          `json:"stream_id"`
	Version       int             `json:"version"`
	Type          string          `json:"type"`
	Data          json.RawMessage `json:"data"`
	Meta          events.Meta     `json:"meta"`
	OccurredAt    string          `json:"occurred_at"`
	Actor         ActorView       `json:"actor"`
	CausationSeq  int64           `json:"causation_seq,omitempty"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	Summary       string          `json:"summary"`
}

// ActorView is who caused an event, with a name for people.
type ActorView struct {
	Kind events.ActorKind `json:"kind"`
	ID   string           `json:"id"`
	Name string           `json:"name,omitempty"`
}

const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

func viewEvent(e events.Envelope, summary string, names func(string) string) EventView {
	a := ActorView{Kind: e.Meta.Actor.Kind, ID: e.Meta.Actor.ID, Name: e.Meta.Actor.Name}
	if a.Kind != events.ActorSystem && a.Kind != events.ActorTelegram {
		a.Name = names(a.ID)
	}
	return EventView{Seq: e.Seq, Position: e.Position().String(), StreamType: e.StreamType, StreamID: e.StreamID,
		Version: e.Version, Type: e.Type, Data: e.Data, Meta: e.Meta, OccurredAt: e.OccurredAt.Format(timeFormat),
		Actor: a, CausationSeq: e.Meta.CausationSeq, CorrelationID: e.Meta.CorrelationID, Summary: summary}
}

// views renders events with their summaries and names.
func (s *Server) views(ctx context.Context, evs []events.Envelope) ([]EventView, error) {
	summaries, names, err := s.names.summarize(ctx, evs)
	if err != nil {
		return nil, err
	}
	out := make([]EventView, len(evs))
	for i, e := range evs {
		out[i] = viewEvent(e, summaries[i], names)
	}
	return out, nil
}

func (s *Server) taskEvents(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	evs, err := s.db.TaskStream(ctx, s.db.Pool(), id)
	if err != nil {
		return err
	}
	if len(evs) == 0 || evs[0].StreamType != events.StreamTask {
		return events.NotFound("task", id)
	}
	out, err := s.views(ctx, evs)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, out)
}

// taskAt answers GET .../tasks/:id?at=<RFC 3339>: the fold of the task's
// events up to then.
func (s *Server) taskAt(c echo.Context, id string) error {
	at, err := time.Parse(time.RFC3339Nano, c.QueryParam("at"))
	if err != nil {
		return events.Invalid("at", "must be an RFC 3339 time like 2026-11-21T23:02:49Z or 2026-11-21T23:02:49.123456+01:00")
	}
	t, err := s.db.TaskAt(c.Request().Context(), s.db.Pool(), id, at)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

func (s *Server) taskChain(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ch, err := s.db.TaskChain(c.Request().Context(), s.db.Pool(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, ch)
}

// attachPreviousAttempts gives a retry the story of the attempts before it.
// The task is already the worker's, so a failure here is logged rather than
// failing the request: the worker would otherwise hold a task it never saw.
// Originals cost nothing: no query without a parent.
func (s *Server) attachPreviousAttempts(c echo.Context, t *store.TaskWithType) {
	s.attachInputs(c, t)
	if t == nil || t.RetryCount == 0 || t.ParentTaskID == nil {
		return
	}
	as, err := s.db.PreviousAttempts(c.Request().Context(), s.db.Pool(), *t.ParentTaskID)
	if err != nil {
		s.log.Warn().Err(err).Str("task_id", t.ID).Str("request_id", requestID(c)).
			Msg("previous attempts unavailable; sending the task without them")
		return
	}
	t.PreviousAttempts = as
}

// attachInputs gives a task with dependencies their results and files, as
// attachPreviousAttempts does its story: a failure is logged, and a task
// without dependencies, or claimed with its inputs, costs nothing.
func (s *Server) attachInputs(c echo.Context, t *store.TaskWithType) {
	if t == nil || len(t.DependsOn) == 0 || t.Inputs != nil {
		return
	}
	in, err := s.db.TaskInputs(c.Request().Context(), &t.Task)
	if err != nil {
		s.log.Warn().Err(err).Str("task_id", t.ID).Str("request_id", requestID(c)).
			Msg("inputs unavailable; sending the task without them")
		return
	}
	t.Inputs = in
}

// Event page sizes.
const (
	defaultEventLimit = 100
	maxEventLimit     = 1000
)

// EventPage is data of GET /admin/events.
type EventPage struct {
	Events []EventView `json:"events"`
	// Next is the position to pass as after for the following page. When
	// the page is not full it is the log's head, so a caller polling with a
	// filter does not rescan what it already passed.
	Next string `json:"next"`
}

// eventFilter is a validated set of stream filters.
type eventFilter struct {
	types    map[string]bool
	streamID string
	workerID string
}

func (f eventFilter) store() store.LogFilter {
	lf := store.LogFilter{StreamID: f.streamID, WorkerID: f.workerID}
	for t := range f.types {
		lf.Types = append(lf.Types, t)
	}
	return lf
}

// parseEventFilter reads type (repeated or comma-separated), stream_id and
// worker_id.
func parseEventFilter(c echo.Context) (eventFilter, error) {
	var f eventFilter
	for _, v := range c.QueryParams()["type"] {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			if !events.KnownType(t) {
				return f, events.Invalid("type", "unknown event type %q; known: %s", t, strings.Join(events.Types(), ", "))
			}
			if f.types == nil {
				f.types = map[string]bool{}
			}
			f.types[t] = true
		}
	}
	var err error
	if v := c.QueryParam("stream_id"); v != "" {
		if f.streamID, err = parseUUID("stream_id", v); err != nil {
			return f, err
		}
	}
	if v := c.QueryParam("worker_id"); v != "" {
		if f.workerID, err = parseUUID("worker_id", v); err != nil {
			return f, err
		}
	}
	return f, nil
}

func parseLimit(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return defaultEventLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxEventLimit {
		return 0, events.Invalid("limit", "must be a number from 1 to %d", maxEventLimit)
	}
	return n, nil
}

func (s *Server) listEvents(c echo.Context) error {
	after, err := events.ParsePosition(c.QueryParam("after"))
	if err != nil {
		return err
	}
	limit, err := parseLimit(c)
	if err != nil {
		return err
	}
	f, err := parseEventFilter(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	evs, next, err := s.db.ReadLogPage(ctx, s.db.Pool(), after, limit, f.store())
	if err != nil {
		return err
	}
	views, err := s.views(ctx, evs)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, EventPage{Events: views, Next: next.String()})
}

// nameCache maps user ids to display names for summaries. Users are never
// renamed, so a found name is kept; an id that names nobody is retried after
// a minute (a projection being rebuilt, say).
type nameCache struct {
	db  *store.DB
	now func() time.Time
	mu  sync.RWMutex
	m   map[string]nameEntry
}

type nameEntry struct {
	name       string
	retryAfter time.Time // zero for a found name
}

func newNameCache(db *store.DB, now func() time.Time) *nameCache {
	return &nameCache{db: db, now: now, m: map[string]nameEntry{}}
}

// summarize returns each event's summary and a names function that knows
// every person they mention, looking the unknown ones up in one query.
func (n *nameCache) summarize(ctx context.Context, evs []events.Envelope) ([]string, func(string) string, error) {
	now := n.now()
	var missing []string
	asked := map[string]bool{}
	probe := func(id string) string {
		n.mu.RLock()
		e, ok := n.m[id]
		n.mu.RUnlock()
		if (!ok || (e.name == "" && now.After(e.retryAfter))) && !asked[id] && isUUID(id) {
			asked[id] = true
			missing = append(missing, id)
		}
		return e.name
	}
	summaries := make([]string, len(evs))
	for i, e := range evs {
		summaries[i] = events.Summary(e, probe)
		if k := e.Meta.Actor.Kind; k != events.ActorSystem && k != events.ActorTelegram {
			probe(e.Meta.Actor.ID)
		}
	}
	names := func(id string) string {
		n.mu.RLock()
		defer n.mu.RUnlock()
		return n.m[id].name
	}
	if len(missing) == 0 {
		return summaries, names, nil
	}
	found, err := n.db.UserNames(ctx, missing)
	if err != nil {
		return nil, nil, err
	}
	n.mu.Lock()
	for _, id := range missing {
		if name, ok := found[id]; ok {
			n.m[id] = nameEntry{name: name}
		} else {
			n.m[id] = nameEntry{retryAfter: now.Add(time.Minute)}
		}
	}
	n.mu.Unlock()
	for i, e := range evs {
		summaries[i] = events.Summary(e, names)
	}
	return summaries, names, nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}
