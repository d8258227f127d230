package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
)

var errEnough = errors.New("enough for this connection")

// writers runs n workload goroutines until the returned stop is called; stop
// returns how many events they appended.
func (e *histEnv) writers(n int, workers []*histWorker, descLen int) (stop func() int) {
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	var total atomic.Int64
	for i := range n {
		wg.Go(func() {
			appended, err := e.workload(ctx, workers, uint64(time.Now().UnixNano())+uint64(i), 0, descLen)
			total.Add(int64(appended))
			if err != nil {
				e.t.Errorf("writer: %v", err)
			}
		})
	}
	return func() int {
		cancel()
		wg.Wait()
		return int(total.Load())
	}
}

// follow reads the stream from q.After with reconnects after each cut
// (events per connection), then, once final returns the whole log (after the
// writers stopped), until it has the last event the query matches.
func (e *histEnv) follow(q client.EventQuery, cuts []int, final func() []events.Envelope) ([]string, error) {
	var got []string
	for _, n := range cuts {
		seen := 0
		last, err := e.admin.Stream(e.ctx, q, func(ev client.Event) error {
			got = append(got, ev.Position)
			if seen++; seen == n {
				return errEnough
			}
			return nil
		})
		if !errors.Is(err, errEnough) {
			return got, err
		}
		q.After = last
	}
	var target string
	for _, ev := range final() {
		if matchesFilter(ev, q.Types, q.StreamID, q.WorkerID) {
			target = ev.Position().String()
		}
	}
	if len(got) > 0 && got[len(got)-1] == target {
		return got, nil
	}
	ctx, cancel := context.WithTimeout(e.ctx, horizonWait)
	defer cancel()
	_, err := e.admin.Stream(ctx, q, func(ev client.Event) error {
		got = append(got, ev.Position)
		if ev.Position == target {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		return got, err
	}
	return got, nil
}

// TestTailResumesExactlyOnceAcrossReconnects starts tails at a position P in
// the past and cuts each three times while writers append, resuming with
// Last-Event-ID: every event after P arrives exactly once, in order. A small
// window makes the tails catch up from the table, then join the live feed,
// several times over.
func TestTailResumesExactlyOnceAcrossReconnects(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{Window: 64, PageSize: 50})
	workers := []*histWorker{e.worker("Genesis", 100), e.worker("Exodus", 100), e.worker("Leviticus", 100)}
	_, err := e.workload(e.ctx, workers, 1, 40, 0)
	require.NoError(t, err)
	history := e.allEvents()
	require.Greater(t, len(history), 150)
	p := history[50].Position().String()

	stop := e.writers(4, workers, 0)
	var all []events.Envelope
	stopped := make(chan struct{})
	final := func() []events.Envelope {
		<-stopped
		return all
	}
	queries := map[string]client.EventQuery{
		"all":    {After: p},
		"worker": {After: p, WorkerID: workers[1].ID},
		"types":  {After: p, Types: []string{"task.claimed", "task.released"}},
	}
	got := map[string][]string{}
	var mu sync.Mutex
	var wg, reconnected sync.WaitGroup
	for name, q := range queries {
		reconnected.Add(1)
		wg.Go(func() {
			cuts := []int{120, 37, 300}
			if name != "all" {
				cuts = []int{10, 7, 25}
			}
			once := sync.OnceFunc(reconnected.Done)
			defer once()
			positions, err := e.follow(q, cuts, func() []events.Envelope {
				once() // three reconnects done while the writers run
				return final()
			})
			require.NoError(t, err, name)
			mu.Lock()
			got[name] = positions
			mu.Unlock()
		})
	}
	reconnected.Wait()
	appended := stop()
	all = e.allEvents()
	close(stopped)
	wg.Wait()

	after := all[51:]
	require.Equal(t, p, all[50].Position().String())
	for name, q := range queries {
		var want []string
		for _, ev := range after {
			if matchesFilter(ev, q.Types, q.StreamID, q.WorkerID) {
				want = append(want, ev.Position().String())
			}
		}
		require.Equal(t, want, got[name], "%s: every event after P exactly once, in order", name)
		t.Logf("%s: %d events through 4 connections", name, len(got[name]))
	}
	t.Logf("writers appended %d events while the tails reconnected", appended)
}

// TestTailDropsASlowClientWithoutSlowingTheOthers: a client that stops
// reading fills its buffer and is told it is too slow and disconnected,
// while the other tails receive everything; it then resumes with
// Last-Event-ID and misses nothing.
func TestTailDropsASlowClientWithoutSlowingTheOthers(t *testing.T) {
	// Small socket buffers, so a client that stops reading blocks the
	// server's writes after kilobytes rather than megabytes.
	e := newHistEnvSockets(t, api.TailConfig{Window: 512, PageSize: 100, WriteTimeout: 2 * horizonWait}, 32<<10)
	workers := []*histWorker{e.worker("Genesis", 100), e.worker("Exodus", 100)}
	const desc = 2000
	_, err := e.workload(e.ctx, workers, 1, 5, 0)
	require.NoError(t, err)
	start := e.allEvents()
	startPos := start[len(start)-1].Position().String()

	// Three healthy tails from startPos, reading until told to stop.
	type tail struct {
		positions []string
		err       error
	}
	tails := make([]*tail, 3)
	tailCtx, stopTails := context.WithCancel(e.ctx)
	defer stopTails()
	var tailsDone sync.WaitGroup
	var tailMu sync.Mutex
	for i := range tails {
		tails[i] = &tail{}
		tailsDone.Go(func() {
			_, err := e.admin.Stream(tailCtx, client.EventQuery{After: startPos}, func(ev client.Event) error {
				tailMu.Lock()
				tails[i].positions = append(tails[i].positions, ev.Position)
				tailMu.Unlock()
				return nil
			})
			tails[i].err = err
		})
	}

	measure := func(d time.Duration) float64 {
		stop := e.writers(2, workers, desc)
		time.Sleep(d) // a measurement window, not a wait for a condition
		return float64(stop()) / d.Seconds()
	}
	without := measure(2 * time.Second)

	// The slow client starts at the head (inside the broadcaster's window,
	// so it is live at once), reads the headers, then nothing; its receive
	// buffer is small too.
	now := e.allEvents()
	slowStart := now[len(now)-1].Position().String()
	slowCtx, stopSlow := context.WithCancel(e.ctx)
	defer stopSlow()
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
		})
		return errors.Join(err, serr)
	}}
	req, err := http.NewRequestWithContext(slowCtx, http.MethodGet, e.url+"/api/v1/admin/events/stream?after="+slowStart, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.admin.Token())
	resp, err := (&http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}).Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	defer resp.Body.Close()

	stop := e.writers(2, workers, desc)
	began := time.Now()
	require.Eventually(t, func() bool { return e.metric("taskservice_tail_dropped_total") >= 1 }, horizonWait, 20*time.Millisecond,
		"the slow client is dropped")
	stuckFor := time.Since(began)
	during := float64(stop()) / time.Since(began).Seconds()
	after := measure(2 * time.Second) // its connection stays stuck until the write deadline
	t.Logf("writer throughput: %.0f events/s without a stuck client, %.0f events/s while one was stuck (dropped after %s), %.0f events/s after",
		without, during, stuckFor.Round(time.Millisecond), after)
	require.Equal(t, float64(1), e.metric("taskservice_tail_dropped_total"), "only the slow client")

	all := e.allEvents()
	var want []string
	sp, _ := events.ParsePosition(startPos)
	for _, ev := range all {
		if sp.Less(ev.Position()) {
			want = append(want, ev.Position().String())
		}
	}
	require.Eventually(t, func() bool {
		tailMu.Lock()
		defer tailMu.Unlock()
		for _, tl := range tails {
			if len(tl.positions) < len(want) {
				return false
			}
		}
		return true
	}, horizonWait, 20*time.Millisecond, "the healthy tails catch up")
	stopTails()
	tailsDone.Wait()
	for i, tl := range tails {
		require.Equal(t, want, tl.positions, "healthy tail %d got everything, once, in order", i)
	}

	// The slow client reads again: what was queued, then the reason, then the end.
	var slowWant []string
	ss, _ := events.ParsePosition(slowStart)
	for _, ev := range all {
		if ss.Less(ev.Position()) {
			slowWant = append(slowWant, ev.Position().String())
		}
	}
	frames := make(chan sseFrame, 1024)
	go func() { _ = readFrames(resp.Body, frames) }()
	var slowGot []string
	var last sseFrame
	lastID := slowStart
	for f := range frames {
		if f.data != "" && f.event == "" {
			slowGot = append(slowGot, f.id)
		}
		if f.id != "" {
			lastID = f.id
		}
		last = f
	}
	require.Equal(t, "error", last.event, "told why")
	require.Equal(t, "too slow: disconnected; reconnect with Last-Event-ID", last.data)
	require.LessOrEqual(t, len(slowGot), len(slowWant))
	require.Equal(t, slowWant[:len(slowGot)], slowGot, "what it got before is a gapless prefix")

	// It reconnects with Last-Event-ID and catches up.
	var rest []string
	head := slowWant[len(slowWant)-1]
	_, err = e.admin.Stream(e.ctx, client.EventQuery{After: lastID}, func(ev client.Event) error {
		rest = append(rest, ev.Position)
		if ev.Position == head {
			return errEnough
		}
		return nil
	})
	require.ErrorIs(t, err, errEnough)
	require.Equal(t, slowWant, append(slowGot, rest...), "nothing lost across the drop")
}

func TestTailAuthValidationCapHeartbeatAndShutdown(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{MaxClients: 2, Heartbeat: 50 * time.Millisecond})
	w := e.worker("Genesis", 1)

	status := func(query string, header map[string]string) (int, string) {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		resp, err := e.rawStream(ctx, query, header)
		require.NoError(t, err)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			var b strings.Builder
			buf := make([]byte, 4096)
			n, _ := resp.Body.Read(buf)
			b.Write(buf[:n])
			return resp.StatusCode, b.String()
		}
		return resp.StatusCode, ""
	}
	code, _ := status("", map[string]string{"Authorization": ""})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = status("", map[string]string{"Authorization": "Bearer " + w.Token()})
	require.Equal(t, http.StatusForbidden, code)
	code, body := status("?type=task.claimed,bogus", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `"field":"type"`)
	code, body = status("", map[string]string{"Last-Event-ID": "yesterday"})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `"field":"Last-Event-ID"`)
	code, body = status("?after=1-x", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `"field":"after"`)
	code, body = status("?worker_id=42", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `"field":"worker_id"`)

	// A stream token opens the stream by query, and nothing else.
	tok, err := e.admin.StreamToken(e.ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), tok.ExpiresAt, 5*time.Second)
	code, _ = status("?token="+tok.Token, map[string]string{"Authorization": ""})
	require.Equal(t, http.StatusOK, code)
	other := client.New(e.url, e.hc)
	other.SetToken(tok.Token)
	_, err = other.Workers(e.ctx)
	require.True(t, client.IsStatus(err, http.StatusUnauthorized), "a stream token is no login: %v", err)
	anon := client.New(e.url, e.hc)
	err = anon.Do(e.ctx, http.MethodGet, "/api/v1/admin/workers?token="+tok.Token, nil, nil)
	require.True(t, client.IsStatus(err, http.StatusUnauthorized), "?token= opens only the stream: %v", err)
	code, _ = status("?token=garbage", map[string]string{"Authorization": ""})
	require.Equal(t, http.StatusUnauthorized, code)
	e.offset.Store(int64(2 * time.Minute))
	code, body = status("?token="+tok.Token, map[string]string{"Authorization": ""})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "expired")
	e.offset.Store(0)
	err = w.Do(e.ctx, http.MethodPost, "/api/v1/admin/events/stream-token", nil, nil)
	require.True(t, client.IsStatus(err, http.StatusForbidden), "workers get no stream token: %v", err)

	// A stream from now: its first frame is an id (its position), then pings
	// every Heartbeat, then the events that follow.
	ctx1, cancel1 := context.WithCancel(e.ctx)
	defer cancel1()
	resp1, err := e.rawStream(ctx1, "", nil)
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp1.Header.Get("Content-Type"))
	frames := make(chan sseFrame, 64)
	go func() { _ = readFrames(resp1.Body, frames) }()
	first := <-frames
	require.NotEmpty(t, first.id)
	require.Empty(t, first.data)
	for f := range frames { // events the broadcaster had not read yet may come first
		if f.comment == "ping" {
			break
		}
	}
	task, err := e.admin.CreateTask(e.ctx, client.NewTask{Title: "live", TaskTypeID: e.taskType.ID})
	require.NoError(t, err)
	var ev sseFrame
	for ev = range frames {
		if strings.Contains(ev.data, task.ID) {
			break
		}
	}
	require.Contains(t, ev.data, task.ID)
	require.Contains(t, ev.data, `"summary":"created \"live\" (medium)"`)
	p, err := events.ParsePosition(ev.id)
	require.NoError(t, err)
	fp, _ := events.ParsePosition(first.id)
	require.True(t, fp.Less(p))

	// The cap: a second stream fits, a third is refused with 503.
	ctx2, cancel2 := context.WithCancel(e.ctx)
	resp2, err := e.rawStream(ctx2, "", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp2.StatusCode)
	code, body = status("", nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "too many event streams")
	cancel2()
	resp2.Body.Close()
	require.Eventually(t, func() bool { return e.metric("taskservice_tail_streams") == 1 }, 10*time.Second, 10*time.Millisecond)

	// Shutdown ends open streams cleanly; new ones are refused until restart.
	e.stopTail()
	var end sseFrame
	for f := range frames { // closed at EOF
		end = f
	}
	require.Equal(t, "server shutting down", end.comment)
	code, _ = status("", nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, float64(0), e.metric("taskservice_tail_streams"))
}

// TestTailClientReconnectsByItself: client.Tail resumes after the server
// drops it (too slow) and delivers every event once.
func TestTailClientReconnectsByItself(t *testing.T) {
	e := newHistEnvSockets(t, api.TailConfig{Window: 64, PageSize: 32, WriteTimeout: 2 * horizonWait}, 16<<10)
	workers := []*histWorker{e.worker("Genesis", 100)}
	start := e.allEvents()
	startPos := start[len(start)-1].Position().String()

	var got []string
	reconnects := 0
	var target atomic.Value
	slowDone := make(chan error, 1)
	gate := make(chan struct{})
	go func() {
		slowDone <- e.admin.Tail(e.ctx, client.TailOptions{EventQuery: client.EventQuery{After: startPos},
			OnReconnect: func(err error, after string, _ time.Duration) {
				var se *client.StreamError
				if errors.As(err, &se) {
					reconnects++
				}
			}}, func(ev client.Event) error {
			if len(got) == 0 {
				<-gate // hold the first event until the buffer overflowed
			}
			got = append(got, ev.Position)
			if tgt, ok := target.Load().(string); ok && tgt == ev.Position {
				return errEnough
			}
			return nil
		})
	}()
	stop := e.writers(1, workers, 2000)
	require.Eventually(t, func() bool { return e.metric("taskservice_tail_dropped_total") >= 1 }, horizonWait, 10*time.Millisecond)
	stop()
	all := e.allEvents()
	target.Store(all[len(all)-1].Position().String())
	close(gate)
	require.ErrorIs(t, <-slowDone, errEnough)
	require.GreaterOrEqual(t, reconnects, 1)
	var want []string
	for _, ev := range all[len(start):] {
		want = append(want, ev.Position().String())
	}
	require.Equal(t, want, got)
}

// TestTailIdleReadsNothing: with no stream open the broadcaster follows the
// log's head without reading events; a stream opened afterwards from an
// earlier position still gets every event after it, from the table.
func TestTailIdleReadsNothing(t *testing.T) {
	e := newHistEnv(t, api.TailConfig{Window: 64, PageSize: 50})
	e.waitTailRunning()
	workers := []*histWorker{e.worker("Numbers", 100)}
	_, err := e.workload(e.ctx, workers, 1, 5, 0)
	require.NoError(t, err)
	p := e.allEvents()[2].Position()
	before := e.metric("taskservice_tail_reads_total")
	_, err = e.workload(e.ctx, workers, 2, 30, 0)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // wakes spaced by MinInterval (20 ms) come and go
	require.Equal(t, before, e.metric("taskservice_tail_reads_total"), "no stream open: no log read")

	all := e.allEvents()
	var want, got []string
	for _, ev := range all {
		if p.Less(ev.Position()) {
			want = append(want, ev.Position().String())
		}
	}
	_, err = e.admin.Stream(e.ctx, client.EventQuery{After: p.String()}, func(ev client.Event) error {
		if got = append(got, ev.Position); len(got) == len(want) {
			return errEnough
		}
		return nil
	})
	require.ErrorIs(t, err, errEnough)
	require.Equal(t, want, got)
}
