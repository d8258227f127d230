package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// TestTailBench measures the live tail for the README: N tails (200) follow
// the stream while writers append at a steady rate (2,000 events/s); every
// tail must receive every event; it reports the delivery lag (occurred_at to
// the tail reading it) and how much the tails cost the writers. Figures, not
// assertions on speed. Run it alone:
//
//	TAIL_BENCH=1 go test ./api -run TestTailBench -v -timeout 30m
//
// TAIL_BENCH_CLIENTS, TAIL_BENCH_RATE and TAIL_BENCH_SECONDS change the load,
// TAIL_BENCH_WRITE_BUDGET the broadcaster's stream writes per second.
func TestTailBench(t *testing.T) {
	if os.Getenv("TAIL_BENCH") == "" {
		t.Skip("set TAIL_BENCH=1 to run the tail benchmark")
	}
	clients := envInt("TAIL_BENCH_CLIENTS", 200)
	rate := envInt("TAIL_BENCH_RATE", 2000)
	seconds := envInt("TAIL_BENCH_SECONDS", 20)
	e := newHistEnv(t, api.TailConfig{MaxClients: clients + 10, WriteBudget: envInt("TAIL_BENCH_WRITE_BUDGET", 0)})
	workers := make([]*histWorker, 8)
	for i := range workers {
		workers[i] = e.worker(fmt.Sprintf("Bench%d", i), 100)
	}

	// 1. Writers alone, as fast as they go: the baseline.
	alone := e.benchWriters(workers, 0, 10*time.Second)
	t.Logf("writers alone, unpaced: %.0f events/s", alone.rate())

	// 2. The tails follow from the head while writers append at rate.
	head := e.allEvents()
	start := head[len(head)-1].Position()
	tails := make([]*benchTail, clients)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: 0}
	for i := range tails {
		tails[i] = &benchTail{}
		wg.Go(func() { tails[i].err = tails[i].follow(ctx, e, tr, start) })
	}
	require.Eventually(t, func() bool { return e.metric("taskservice_tail_streams") == float64(clients) }, time.Minute, 10*time.Millisecond)
	paced := e.benchWriters(workers, rate, time.Duration(seconds)*time.Second)
	all := e.allEvents()
	var want int64
	var sum int64
	for _, ev := range all {
		if start.Less(ev.Position()) {
			want++
			sum += ev.Seq
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, tl := range tails {
		for tl.count.Load() < want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	wg.Wait()
	complete := 0
	lags := make([]int64, 0, int(want)*clients)
	for _, tl := range tails {
		if tl.count.Load() == want && tl.seqSum == sum && tl.ordered {
			complete++
		}
		lags = append(lags, tl.lags...)
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	pct := func(p float64) time.Duration {
		if len(lags) == 0 {
			return 0
		}
		return time.Duration(lags[min(len(lags)-1, int(float64(len(lags))*p))])
	}
	t.Logf("%d tails, writers paced at %d events/s for %ds: appended %d events (%.0f events/s)",
		clients, rate, seconds, paced.events, paced.rate())
	t.Logf("tails that received every event once, in order: %d of %d; dropped: %.0f",
		complete, clients, e.metric("taskservice_tail_dropped_total"))
	t.Logf("delivery lag (occurred_at to read by the tail) over %d deliveries: p50 %s, p90 %s, p99 %s, max %s",
		len(lags), pct(0.50), pct(0.90), pct(0.99), pct(1))
	t.Logf("writer command latency, paced: p50 %s, p99 %s", paced.latency(0.5), paced.latency(0.99))
	t.Logf("broadcaster reads: %.0f for %d events", e.metric("taskservice_tail_reads_total"), want)

	// 3. Writers as fast as they go again, now with the tails following.
	ctx2, cancel2 := context.WithCancel(e.ctx)
	head = e.allEvents()
	start = head[len(head)-1].Position()
	tails2 := make([]*benchTail, clients)
	var wg2 sync.WaitGroup
	for i := range tails2 {
		tails2[i] = &benchTail{}
		wg2.Go(func() { tails2[i].err = tails2[i].follow(ctx2, e, tr, start) })
	}
	require.Eventually(t, func() bool { return e.metric("taskservice_tail_streams") == float64(clients) }, time.Minute, 10*time.Millisecond)
	busy := e.benchWriters(workers, 0, 10*time.Second)
	cancel2()
	wg2.Wait()
	t.Logf("writers unpaced with %d tails: %.0f events/s (alone: %.0f events/s, change %+.1f%%); dropped tails so far: %.0f",
		clients, busy.rate(), alone.rate(), 100*(busy.rate()-alone.rate())/alone.rate(), e.metric("taskservice_tail_dropped_total"))
	require.Equal(t, clients, complete, "every tail received every event")
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchTail follows the stream with a minimal parser: positions, order, a
// checksum of seqs, and the lag of each event.
type benchTail struct {
	count   atomic.Int64
	seqSum  int64
	ordered bool
	lags    []int64
	err     error
}

func (bt *benchTail) follow(ctx context.Context, e *histEnv, tr *http.Transport, after events.Position) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/api/v1/admin/events/stream?after="+after.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.admin.Token())
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	bt.ordered = true
	last := after
	var pos events.Position
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	occurred := []byte(`"occurred_at":"`)
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			pos = parsePos(bytes.TrimSpace(line[4:]))
		case bytes.HasPrefix(line, []byte("data: ")):
			now := time.Now()
			if !last.Less(pos) {
				bt.ordered = false
			}
			last = pos
			bt.seqSum += pos.Seq
			if pos.Seq%8 != 0 { // the lag of one event in 8: the bench's own cost stays small
				bt.count.Add(1)
				continue
			}
			if i := bytes.Index(line, occurred); i >= 0 {
				rest := line[i+len(occurred):]
				if j := bytes.IndexByte(rest, '"'); j > 0 {
					if at, err := time.Parse(time.RFC3339Nano, string(rest[:j])); err == nil {
						bt.lags = append(bt.lags, int64(now.Sub(at)))
					}
				}
			}
			bt.count.Add(1)
		case bytes.HasPrefix(line, []byte("event: error")):
			return fmt.Errorf("dropped")
		}
	}
}

// benchRun is what writers did.
type benchRun struct {
	events    int64
	elapsed   time.Duration
	latencies []int64
}

func (r benchRun) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

func (r benchRun) latency(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := append([]int64(nil), r.latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return time.Duration(l[min(len(l)-1, int(float64(len(l))*p))])
}

// benchWriters runs 16 writers for d, paced to rate events/s (0: as fast as
// they go): create (assigned), claim, update, complete = 5 events a task.
func (e *histEnv) benchWriters(workers []*histWorker, rate int, d time.Duration) benchRun {
	stop, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	ctx := context.WithoutCancel(stop) // commands in flight finish
	var scheduled, appended atomic.Int64
	var mu sync.Mutex
	var latencies []int64
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range 16 {
		w := workers[i%len(workers)]
		wg.Go(func() {
			adminMeta := events.Meta{Actor: events.Actor{Kind: events.ActorAdmin, ID: e.adminID}}
			wMeta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w.ID}}
			var local []int64
			defer func() {
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			}()
			pace := func(n int64) bool {
				if rate > 0 {
					due := begin.Add(time.Duration(float64(scheduled.Add(n)) / float64(rate) * float64(time.Second)))
					if wait := time.Until(due); wait > 0 {
						select {
						case <-stop.Done():
							return false
						case <-time.After(wait):
						}
					}
				}
				return stop.Err() == nil
			}
			for n := 0; ; n++ {
				if !pace(2) {
					return
				}
				t0 := time.Now()
				task, err := e.db.CreateTask(ctx, e.pool, store.NewTaskParams{TaskTypeID: e.taskType.ID, NewTaskParams: events.NewTaskParams{
					Title: fmt.Sprintf("bench %d", n), CreatedBy: e.adminID, AssignedTo: w.ID}}, adminMeta)
				if err != nil {
					e.t.Errorf("bench writer: %v", err)
					return
				}
				local = append(local, int64(time.Since(t0)))
				appended.Add(2)
				steps := []store.TaskDecision{
					func(t *events.Task) ([]events.Payload, error) { return t.Claim(w.ID) },
					func(t *events.Task) ([]events.Payload, error) {
						return t.PostUpdate(uuid.Must(uuid.NewV7()).String(), w.ID, "halfway", true)
					},
					func(t *events.Task) ([]events.Payload, error) { return t.Complete(w.ID) },
				}
				for _, step := range steps {
					if !pace(1) {
						return
					}
					t0 := time.Now()
					if _, _, err := e.db.UpdateTask(ctx, e.pool, task.ID, wMeta, step); err != nil {
						e.t.Errorf("bench writer: %v", err)
						return
					}
					local = append(local, int64(time.Since(t0)))
					appended.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return benchRun{events: appended.Load(), elapsed: time.Since(begin), latencies: latencies}
}

// parsePos reads "tx-seq" without fmt: the bench's clients parse 400,000
// positions a second and must not be what is measured.
func parsePos(b []byte) events.Position {
	var p events.Position
	i := bytes.IndexByte(b, '-')
	if i < 0 {
		return p
	}
	tx, _ := strconv.ParseUint(string(b[:i]), 10, 64)
	seq, _ := strconv.ParseInt(string(b[i+1:]), 10, 64)
	return events.Position{TxID: tx, Seq: seq}
}
