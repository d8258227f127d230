package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The live tail (GET /api/v1/admin/events/stream) is Server-Sent Events over
// one broadcaster per instance: a single goroutine, woken by the hub (local
// commits; other instances' through the listener) or a safety ticker, reads
// the log after its own position (one read per wake, however many streams),
// encodes each event once into a shared window of recent frames, and wakes
// the streams. Each stream keeps only a cursor into that window and writes
// what follows it; a stream that falls more than Window events behind is told
// it is too slow and disconnected (the window is every stream's bounded
// buffer, held once). A stream starting before the window catches up from
// the table on its own, then joins. Positions make every hand-over exact: a
// stream only sends events after the last position it considered.

const (
	streamPath     = "/api/v1/admin/events/stream"
	streamAudience = "sse"
	streamTokenTTL = 60 * time.Second
	// tooSlow is what a client that fell behind is told before the server hangs up.
	tooSlow = "too slow: disconnected; reconnect with Last-Event-ID"
	// rewound is what every stream is told when the database turned out to be
	// behind the broadcaster's position (a failover to a standby that lagged).
	rewound = "the database failed over to a server that lost recent events; reconnect with Last-Event-ID"
)

// TailConfig configures the live tail. Zero values take the defaults.
type TailConfig struct {
	// MaxClients caps concurrent streams per instance; beyond it, 503 (500).
	MaxClients int
	// Window is how many recent events the broadcaster keeps (8192, at
	// least two pages): a stream may fall at most this far behind the live
	// end before it is told it is too slow and disconnected, and a stream
	// resuming within it joins without reading the table.
	Window int
	// Heartbeat is the interval of ": ping" comments on an idle stream (15 s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a client (10 s); the server itself
	// has no WriteTimeout, which would cut every stream.
	WriteTimeout time.Duration
	// Poll is the safety ticker: the broadcaster reads at least this often
	// even without a wake (1 s).
	Poll time.Duration
	// MinInterval spaces the broadcaster's reads so that wakes arriving
	// together become one read and one write per stream (20 ms).
	MinInterval time.Duration
	// WriteBudget is the stream writes per second the broadcaster aims at
	// under sustained traffic (1500): with many streams it spaces its reads
	// further (streams / WriteBudget, at most MaxInterval), so each write
	// carries more events. Writes, not bytes, are what the fan-out costs.
	WriteBudget int
	// MaxInterval caps that spacing (200 ms): the price in latency under load.
	MaxInterval time.Duration
	// PageSize is the most events read at once (1000).
	PageSize int
}

func (c *TailConfig) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxClients, 500)
	def(&c.PageSize, 1000)
	def(&c.Window, 8192)
	c.Window = max(c.Window, 2*c.PageSize)
	defDur(&c.Heartbeat, 15*time.Second)
	defDur(&c.WriteTimeout, 10*time.Second)
	defDur(&c.Poll, time.Second)
	defDur(&c.MinInterval, 20*time.Millisecond)
	def(&c.WriteBudget, 1500)
	defDur(&c.MaxInterval, 200*time.Millisecond)
	c.MaxInterval = max(c.MaxInterval, c.MinInterval)
}

// interval is the least time between two reads: MinInterval, or longer when
// so many streams are open that one write each per read would exceed the
// write budget. Sporadic events still go out at once: the spacing only
// delays a read that follows another closely.
func (b *broadcaster) interval() time.Duration {
	d := time.Duration(b.streams.Load()) * time.Second / time.Duration(b.cfg.WriteBudget)
	return min(max(d, b.cfg.MinInterval), b.cfg.MaxInterval)
}

// frame is one event encoded once for every client, with what filters need.
type frame struct {
	pos      events.Position
	typ      string
	streamID string
	version  int
	workerID string // data.worker_id
	actorID  string
	sse      []byte // "id: <position>\ndata: <EventView JSON>\n\n"
}

// matches is LogFilter's SQL, in memory, for events fanned out live.
func (f eventFilter) matches(fr *frame) bool {
	if f.types != nil && !f.types[fr.typ] {
		return false
	}
	if f.streamID != "" && fr.streamID != f.streamID {
		return false
	}
	if f.workerID != "" && fr.workerID != f.workerID && fr.actorID != f.workerID && fr.streamID != f.workerID {
		return false
	}
	return true
}

// frames encodes events for the stream.
func (s *Server) frames(ctx context.Context, evs []events.Envelope) ([]*frame, error) {
	views, err := s.views(ctx, evs)
	if err != nil {
		return nil, err
	}
	out := make([]*frame, len(evs))
	for i, e := range evs {
		data, err := json.Marshal(views[i])
		if err != nil {
			return nil, fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		var about struct {
			WorkerID string `json:"worker_id"`
		}
		_ = json.Unmarshal(e.Data, &about) // a payload without a string worker_id names none
		pos := e.Position().String()
		buf := make([]byte, 0, len(pos)+len(data)+12)
		buf = append(append(append(append(buf, "id: "...), pos...), "\ndata: "...), data...)
		out[i] = &frame{pos: e.Position(), typ: e.Type, streamID: e.StreamID, version: e.Version, workerID: about.WorkerID,
			actorID: e.Meta.Actor.ID, sse: append(buf, "\n\n"...)}
	}
	return out, nil
}

// tailClient is one stream as the broadcaster sees it.
type tailClient struct {
	filter eventFilter
	// cursor: every event up to here was written or skipped by the filter.
	// The handler moves it after each write; the broadcaster reads it.
	cursor atomic.Pointer[events.Position]
	wake   chan struct{} // capacity 1: the window has news
	// dropped is closed by the broadcaster when the cursor fell out of the
	// window, or the window was dropped (rewind): the stream must reconnect.
	// why, set before, is what the stream tells its client.
	dropped chan struct{}
	why     string
}

// broadcaster reads the log once per wake and fans it out.
type broadcaster struct {
	s       *Server
	hub     *store.Hub
	cfg     TailConfig
	stopped chan struct{} // closed when Run returns: every stream ends
	streams atomic.Int64  // open streams, for the cap
	m       tailMetrics

	mu      sync.RWMutex
	started bool
	running bool
	pos     events.Position // last position read
	floor   events.Position // window holds every event in (floor, pos]
	window  []*frame
	live    map[*tailClient]struct{}
	// rewoundTo is where the last rewind put pos (zero before any): where
	// the database's log left the one this instance had read.
	rewoundTo events.Position
}

type tailMetrics struct {
	streams prometheus.Gauge
	dropped prometheus.Counter
	reads   prometheus.Counter
	lag     prometheus.Histogram
	rewinds prometheus.Counter
}

func newBroadcaster(s *Server, hub *store.Hub, cfg TailConfig) *broadcaster {
	cfg.defaults()
	b := &broadcaster{s: s, hub: hub, cfg: cfg, stopped: make(chan struct{}), live: map[*tailClient]struct{}{}}
	b.m.streams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "taskservice_tail_streams", Help: "Open event streams (SSE) on this instance."})
	b.m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "taskservice_tail_dropped_total", Help: "Event streams disconnected because they fell more than the window behind."})
	b.m.reads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "taskservice_tail_reads_total", Help: "Log reads by the tail broadcaster (one per wake, however many streams)."})
	b.m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "taskservice_tail_lag_seconds", Help: "Time from an event's occurred_at to its fan-out to streams.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}})
	b.m.rewinds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "taskservice_tail_log_rewinds_total", Help: "Times the tail broadcaster found the database behind its position in the log (a failover to a lagging standby), rewound and closed its streams."})
	s.metrics.reg.MustRegister(b.m.streams, b.m.dropped, b.m.reads, b.m.lag, b.m.rewinds)
	return b
}

// Run runs the live tail's broadcaster until ctx ends, then closes every
// stream (each ends cleanly with a comment), and meanwhile the user cache's
// refresh and the prune of expired Idempotency-Key answers. Call it once
// per Server; until it runs, the stream route answers 503.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.auth.run(ctx) })
	wg.Go(func() { s.housekeep(ctx) })
	err := s.tail.run(ctx)
	wg.Wait()
	return err
}

func (b *broadcaster) run(ctx context.Context) error {
	b.mu.Lock()
	if b.started {
		b.mu.Unlock()
		return errors.New("api: Run called twice")
	}
	b.started = true
	b.mu.Unlock()
	defer b.stop()

	head, err := b.s.db.LogHead(ctx, b.s.db.Pool())
	for err != nil {
		b.s.log.Warn().Err(err).Msg("tail: cannot read the log head; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(b.cfg.Poll):
		}
		head, err = b.s.db.LogHead(ctx, b.s.db.Pool())
	}
	b.mu.Lock()
	b.pos, b.floor, b.running = head, head, true
	b.mu.Unlock()

	var wake <-chan struct{}
	if b.hub != nil {
		w, unsubscribe := b.hub.SubscribeTo(store.AnyEvent)
		defer unsubscribe()
		wake = w
	}
	tick := time.NewTicker(b.cfg.Poll)
	defer tick.Stop()
	space := time.NewTimer(0)
	defer space.Stop()
	for {
		b.poll(ctx)
		space.Reset(b.interval())
		select {
		case <-ctx.Done():
			return nil
		case <-space.C:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// poll reads everything visible after the broadcaster's position, a page at
// a time, and publishes it. An error leaves the position where it was: the
// next wake or tick reads again.
func (b *broadcaster) poll(ctx context.Context) {
	if b.streams.Load() == 0 {
		b.skip(ctx)
		return
	}
	for ctx.Err() == nil {
		b.m.reads.Inc()
		evs, err := b.s.db.ReadLog(ctx, b.s.db.Pool(), b.pos, b.cfg.PageSize, store.LogFilter{})
		if err == nil && len(evs) == 0 {
			// Nothing new, or the database is behind (only then is
			// nothing ever new): tell which.
			err = b.rewindIfBehind(ctx)
		}
		if err == nil && len(evs) > 0 {
			var frames []*frame
			if frames, err = b.s.frames(ctx, evs); err == nil {
				b.publish(frames)
				now := time.Now()
				for _, e := range evs {
					b.m.lag.Observe(now.Sub(e.OccurredAt).Seconds())
				}
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				b.s.log.Warn().Err(err).Msg("tail: reading the log failed; retrying on the next wake")
			}
			return
		}
		if len(evs) < b.cfg.PageSize {
			return
		}
		// Catching up on a backlog (the horizon held back by a long
		// transaction, say): give the streams time to write each page
		// before the next moves the window on.
		select {
		case <-ctx.Done():
		case <-time.After(b.interval()):
		}
	}
}

// skip moves an idle broadcaster to the log's head without reading the
// events: with no stream open, reading and encoding each one is wasted (a
// quarter of the service's CPU on a busy queue; ADR 016). A stream that
// opens later and wants earlier events catches up from the table.
func (b *broadcaster) skip(ctx context.Context) {
	end, err := b.s.db.ReadLogEnd(ctx, b.s.db.Pool())
	if err == nil && end.Behind(b.pos) {
		err = b.rewind(ctx, end.Head)
	}
	if err != nil {
		if ctx.Err() == nil {
			b.s.log.Warn().Err(err).Msg("tail: cannot read the log head; retrying on the next wake")
		}
		return
	}
	head := end.Head
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.live) > 0 || !b.pos.Less(head) {
		return // a stream joined meanwhile: the next poll reads for it
	}
	b.pos, b.floor, b.window = head, head, nil
}

// rewindIfBehind rewinds when the database is behind the broadcaster's
// position.
func (b *broadcaster) rewindIfBehind(ctx context.Context) error {
	end, err := b.s.db.ReadLogEnd(ctx, b.s.db.Pool())
	if err != nil || !end.Behind(b.pos) {
		return err
	}
	return b.rewind(ctx, end.Head)
}

// rewind moves the broadcaster back to where the database's log left the
// one it had read: the last event of its window that the database still
// holds, or the database's head when it holds none of them (or the window
// is empty). Every event the database holds after that is read again and
// fanned out. The streams are closed: each client saw events that are
// gone, and resumes (see resumePoint).
func (b *broadcaster) rewind(ctx context.Context, head events.Position) error {
	b.mu.RLock()
	refs := make([]store.EventRef, len(b.window))
	for i, fr := range b.window {
		refs[i] = store.EventRef{Pos: fr.pos, StreamID: fr.streamID, Version: fr.version}
	}
	b.mu.RUnlock()
	to := head
	if len(refs) > 0 {
		held, ok, err := b.s.db.LastHeld(ctx, b.s.db.Pool(), refs)
		if err != nil {
			return err
		}
		if ok && held.Less(head) {
			to = held
		}
	}
	b.s.log.Warn().Str("from", b.pos.String()).Str("to", to.String()).
		Msg("tail: the database is behind the log position read (a failover to a standby that lagged?); rewinding and closing the streams")
	b.m.rewinds.Inc()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pos, b.floor, b.window, b.rewoundTo = to, to, nil, to
	for c := range b.live {
		c.why = rewound
		close(c.dropped)
		delete(b.live, c)
	}
	return nil
}

// resumePoint is where a stream resumes whose cursor the database is
// behind: it comes from a log that the database no longer has, so it
// resumes where this instance's broadcaster rewound to (or, if it never
// rewound, from its position) and gets every event the database holds
// after that, some perhaps twice. While the broadcaster is itself behind
// (it has not noticed yet) the client is told to retry shortly.
func (b *broadcaster) resumePoint(ctx context.Context, cursor events.Position) (events.Position, error) {
	end, err := b.s.db.ReadLogEnd(ctx, b.s.db.Pool())
	if err != nil {
		return cursor, err
	}
	if !end.Behind(cursor) {
		return cursor, nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if end.Behind(b.pos) {
		return cursor, unavailable("the database failed over and the event stream is catching up; retry shortly")
	}
	if b.rewoundTo != (events.Position{}) && b.rewoundTo.Less(b.pos) {
		return b.rewoundTo, nil
	}
	return b.pos, nil
}

// publish appends frames to the window, drops the streams the window has
// left behind and wakes the others. It never waits for a stream.
func (b *broadcaster) publish(frames []*frame) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pos = frames[len(frames)-1].pos
	b.window = append(b.window, frames...)
	if over := len(b.window) - b.cfg.Window; over > 0 {
		b.floor = b.window[over-1].pos
		b.window = b.window[over:] // append copies the live part when it grows
	}
	for c := range b.live {
		if c.cursor.Load().Less(b.floor) {
			c.why = tooSlow
			close(c.dropped)
			delete(b.live, c)
			b.m.dropped.Inc()
			continue
		}
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

var errTailStopped = errors.New("tail stopped")

// join makes c live from cursor if the window reaches back that far; false
// when c must first catch up from the table.
func (b *broadcaster) join(c *tailClient, cursor events.Position) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.running {
		return false, errTailStopped
	}
	if cursor.Less(b.floor) {
		return false, nil
	}
	c.cursor.Store(&cursor)
	b.live[c] = struct{}{}
	c.wake <- struct{}{} // read the window at once
	return true, nil
}

func (b *broadcaster) leave(c *tailClient) {
	b.mu.Lock()
	delete(b.live, c)
	b.mu.Unlock()
}

// since returns up to max frames after c's cursor that c wants, and the
// position the scan reached; end is not "" when the stream must end with
// it: the window no longer reaches back to the cursor, or was dropped.
func (b *broadcaster) since(c *tailClient, max int) (out []*frame, reached events.Position, end string) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	cursor := *c.cursor.Load()
	if _, live := b.live[c]; !live {
		return nil, cursor, c.why
	}
	if cursor.Less(b.floor) {
		return nil, cursor, tooSlow
	}
	reached = cursor
	i := sort.Search(len(b.window), func(i int) bool { return cursor.Less(b.window[i].pos) })
	for _, fr := range b.window[i:] {
		reached = fr.pos
		if c.filter.matches(fr) {
			if out = append(out, fr); len(out) == max {
				break
			}
		}
	}
	return out, reached, ""
}

// position is the last position read: a client starting "now" joins there.
func (b *broadcaster) position() (events.Position, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.pos, b.running
}

func (b *broadcaster) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running = false
	b.live = map[*tailClient]struct{}{}
	close(b.stopped)
}

// streamStart reads where a stream starts: Last-Event-ID (a reconnecting
// EventSource) wins over ?after=; with neither, it starts at the live end.
func streamStart(c echo.Context) (pos events.Position, fromNow bool, err error) {
	if v := c.Request().Header.Get("Last-Event-ID"); v != "" {
		pos, err = events.ParsePosition(v)
		if err != nil {
			return pos, false, events.Invalid("Last-Event-ID", "not a position from this stream: %q", v)
		}
		return pos, false, nil
	}
	if v := c.QueryParam("after"); v != "" {
		pos, err = events.ParsePosition(v)
		return pos, false, err
	}
	return pos, true, nil
}

// sseWriter writes to one stream, each write under its own deadline.
type sseWriter struct {
	w       *echo.Response
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
	lastID  events.Position
}

func (w *sseWriter) flush() error {
	if err := w.rc.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	_, err := w.w.Write(w.buf.Bytes())
	w.buf.Reset()
	if err != nil {
		return err
	}
	return w.rc.Flush()
}

func (w *sseWriter) write(s string) error {
	w.buf.WriteString(s)
	return w.flush()
}

// send writes the frames after cursor in one write and returns the new cursor.
func (w *sseWriter) send(frames []*frame, cursor events.Position) (events.Position, error) {
	for _, fr := range frames {
		if cursor.Less(fr.pos) {
			w.buf.Write(fr.sse)
			cursor = fr.pos
		}
	}
	if w.buf.Len() == 0 {
		return cursor, nil
	}
	w.lastID = cursor
	return cursor, w.flush()
}

// maxBatch bounds how many queued events go out in one write.
const maxBatch = 512

func (s *Server) streamEvents(c echo.Context) error {
	f, err := parseEventFilter(c)
	if err != nil {
		return err
	}
	cursor, fromNow, err := streamStart(c)
	if err != nil {
		return err
	}
	b := s.tail
	head, running := b.position()
	if !running {
		return unavailable("the event stream is not running on this instance; retry shortly")
	}
	if n := b.streams.Add(1); n > int64(b.cfg.MaxClients) {
		b.streams.Add(-1)
		return unavailable(fmt.Sprintf("too many event streams (%d); retry later", b.cfg.MaxClients))
	}
	defer b.streams.Add(-1)
	b.m.streams.Inc()
	defer b.m.streams.Dec()
	if fromNow {
		cursor = head
	} else if head.Less(cursor) {
		// Ahead of this instance: another one read further, or the cursor
		// is from a log the database no longer has.
		if cursor, err = b.resumePoint(c.Request().Context(), cursor); err != nil {
			return err
		}
	}
	login, err := s.watchLogin(c)
	if err != nil {
		return err
	}
	defer login.stop()

	resp := c.Response()
	h := resp.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must not buffer the stream
	resp.WriteHeader(http.StatusOK)
	w := &sseWriter{w: resp, rc: http.NewResponseController(resp), timeout: b.cfg.WriteTimeout, lastID: cursor}
	// The deadline outlives the handler on a kept-alive connection; clear it.
	defer func() { _ = w.rc.SetWriteDeadline(time.Time{}) }()
	// An id with no data moves the client's Last-Event-ID without an event,
	// so even a stream that started "now" resumes where it started.
	if err := w.write("retry: 2000\nid: " + cursor.String() + "\n\n"); err != nil {
		return nil
	}

	ctx := c.Request().Context()
	client := &tailClient{filter: f, wake: make(chan struct{}, 1), dropped: make(chan struct{})}
	for {
		if end := login.ended(ctx); end != "" {
			_ = w.write(end)
			return nil
		}
		joined, err := b.join(client, cursor)
		if err != nil {
			_ = w.write(": server shutting down\n\n")
			return nil
		}
		if joined {
			defer b.leave(client)
			break
		}
		// Behind the broadcaster's window: catch up from the table.
		evs, next, err := s.db.ReadLogPage(ctx, s.db.Pool(), cursor, b.cfg.PageSize, f.store())
		if err == nil && len(evs) > 0 {
			var frames []*frame
			if frames, err = s.frames(ctx, evs); err == nil {
				if cursor, err = w.send(frames, cursor); err != nil {
					return nil
				}
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn().Err(err).Str("request_id", requestID(c)).Msg("tail: catching up failed")
				_ = w.write("event: error\ndata: catching up failed; reconnect with Last-Event-ID\n\n")
			}
			return nil
		}
		if cursor.Less(next) {
			cursor = next
		}
	}
	if w.lastID != cursor {
		// The catch-up passed events the filter left out: resume after them.
		if err := w.write("id: " + cursor.String() + "\n\n"); err != nil {
			return nil
		}
	}

	heartbeat := time.NewTicker(b.cfg.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-client.dropped: // even if the write that held it up has since gone out
			_ = w.write("event: error\ndata: " + client.why + "\n\n")
			return nil
		default:
		}
		frames, reached, end := b.since(client, maxBatch)
		if end != "" {
			_ = w.write("event: error\ndata: " + end + "\n\n")
			return nil
		}
		if len(frames) > 0 {
			if _, err := w.send(frames, cursor); err != nil {
				return nil
			}
			heartbeat.Reset(b.cfg.Heartbeat)
		}
		if cursor.Less(reached) {
			cursor = reached
			client.cursor.Store(&reached)
		}
		if len(frames) == maxBatch {
			continue
		}
		select {
		case <-client.wake:
		case <-client.dropped:
			_ = w.write("event: error\ndata: " + client.why + "\n\n")
			return nil
		case <-heartbeat.C:
			if err := w.write(": ping\n\n"); err != nil {
				return nil
			}
		case <-b.stopped:
			_ = w.write(": server shutting down\n\n")
			return nil
		case <-login.expired.C:
			_ = w.write(authExpired(loginExpired))
			return nil
		case <-login.changed:
			if end := login.recheck(ctx); end != "" {
				_ = w.write(end)
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// streamLogin is an open stream's login, which the stream must not
// outlive: it ends at the token's expiry, and every change to the user
// (from any instance, heard through authUsers) checks it again as a new
// request would be checked.
type streamLogin struct {
	s       *Server
	claims  *Claims
	changed <-chan struct{}
	expired *time.Timer
	unwatch func()
}

const loginExpired = "your login expired; log in again"

// authExpired is the frame that ends a stream whose login ended: browsers
// go to the login page on it, and clients stop instead of reconnecting.
func authExpired(why string) string { return "event: auth_expired\ndata: " + why + "\n\n" }

func (s *Server) watchLogin(c echo.Context) (*streamLogin, error) {
	cl := claimsOf(c)
	changed, unwatch := s.auth.watch(cl.Subject)
	// A change heard between the authentication and the watch is checked
	// here; any later one arrives on changed.
	if err := s.activeUser(c.Request().Context(), cl, roleAdmin); err != nil {
		unwatch()
		return nil, err
	}
	end := cl.ExpiresAt.Time
	if cl.LoginExpiresAt != nil {
		end = cl.LoginExpiresAt.Time
	}
	return &streamLogin{s: s, claims: cl, changed: changed, expired: time.NewTimer(end.Sub(s.now())), unwatch: unwatch}, nil
}

func (l *streamLogin) stop() {
	l.expired.Stop()
	l.unwatch()
}

// recheck returns the frame that ends the stream if the login no longer
// holds, or "" while it does.
func (l *streamLogin) recheck(ctx context.Context) string {
	err := l.s.activeUser(ctx, l.claims, roleAdmin)
	if err == nil {
		return ""
	}
	status, body := classify(err)
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return authExpired(body.Message)
	}
	if ctx.Err() == nil {
		l.s.log.Warn().Err(err).Str("user_id", l.claims.Subject).Msg("tail: cannot check an open stream's login again; ending it")
	}
	return "event: error\ndata: could not check the login again; reconnect\n\n"
}

// ended is recheck without waiting: "" unless the login has expired or a
// change to the user revoked it.
func (l *streamLogin) ended(ctx context.Context) string {
	select {
	case <-l.expired.C:
		return authExpired(loginExpired)
	case <-l.changed:
		return l.recheck(ctx)
	default:
		return ""
	}
}

// StreamToken is data of POST /admin/events/stream-token.
type StreamToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// streamTokenRequest is the body of POST /admin/events/stream-token: none,
// or an empty object. It is decoded like every other body, so a client
// sending something it thinks matters hears that it does not.
type streamTokenRequest struct{}

// streamToken issues a token that opens the event stream as ?token=, for
// browsers (EventSource cannot send headers). It lasts a minute and is
// refused everywhere else; an open stream outlives it, but not the login
// it was issued for.
func (s *Server) streamToken(c echo.Context) error {
	var req streamTokenRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	cl := claimsOf(c)
	now := s.now()
	login := cl.ExpiresAt.Time
	exp := now.Add(streamTokenTTL)
	if login.Before(exp) {
		exp = login
	}
	claims := Claims{Email: cl.Email, IsAdmin: true, Epoch: cl.Epoch, LoginExpiresAt: jwt.NewNumericDate(login), RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: cl.Subject, Audience: jwt.ClaimStrings{streamAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
	}}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.cfg.JWTSecret)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, StreamToken{Token: tok, ExpiresAt: exp.UTC()})
}

// streamTokenAuth authenticates the stream route by ?token=.
func (s *Server) streamTokenAuth(c echo.Context, next echo.HandlerFunc) error {
	var claims Claims
	_, err := jwt.ParseWithClaims(c.QueryParam("token"), &claims, func(*jwt.Token) (any, error) { return s.cfg.JWTSecret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(issuer), jwt.WithAudience(streamAudience),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(s.now))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return unauthenticated("stream token expired; get a new one (POST " + streamPath + "-token)")
	case err != nil || claims.Subject == "":
		return unauthenticated("invalid stream token; get one with POST " + streamPath + "-token")
	}
	if err := s.activeUser(c.Request().Context(), &claims, roleAdmin); err != nil {
		return err
	}
	c.Set(claimsKey, &claims)
	return next(c)
}
